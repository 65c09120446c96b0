/** The deploy/ files pass their own tools' checks, and the dashboard asks for metrics the apps export. */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { createApp } from "../../src/http/text/createApp.js";
import { createRecsysApp } from "../../src/http/recsys/createRecsysApp.js";
import { BatchEngine } from "../helpers/engines.js";
import { repoRoot } from "../helpers/fixtures.js";
import { listen } from "../helpers/http.js";
import { parseExposition } from "../helpers/metrics.js";
import { NGINX, NGINX_SITE } from "./nginx.js";

const deploy = (...parts: string[]): string => join(repoRoot, "deploy", ...parts);

describe("deploy/ files", () => {
  it("the systemd unit passes systemd-analyze verify (ExecStart pointed at this machine's node)", () => {
    const dir = mkdtempSync(join(tmpdir(), "torchserve-unit-"));
    try {
      const unit = readFileSync(deploy("systemd", "torchserve-node@.service"), "utf8");
      expect(unit).to.match(/^ExecStart=\/usr\/bin\/node \/opt\/torchserve-node\/dist\/src\/server\.js$/m);
      const local = unit.replace("ExecStart=/usr/bin/node /opt/torchserve-node/dist/src/server.js", `ExecStart=${process.execPath} ${join(repoRoot, "dist", "src", "server.js")}`);
      writeFileSync(join(dir, "torchserve-node@.service"), local);
      const result = spawnSync("systemd-analyze", ["verify", join(dir, "torchserve-node@a.service")], { encoding: "utf8" });
      expect(result.status, result.stderr + result.stdout).to.equal(0);
      expect(result.stderr.trim(), result.stderr).to.equal("");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the Prometheus config passes promtool check config", () => {
    const result = spawnSync("promtool", ["check", "config", deploy("prometheus", "prometheus.yml")], { encoding: "utf8" });
    expect(result.status, result.stderr + result.stdout).to.equal(0);
  });

  it("the nginx config passes nginx -t inside a minimal main config", () => {
    expect(existsSync(NGINX), `${NGINX} is missing: bash scripts/setup.sh --test`).to.equal(true);
    const dir = mkdtempSync(join(tmpdir(), "torchserve-nginx-t-"));
    try {
      copyFileSync(NGINX_SITE, join(dir, "site.conf"));
      writeFileSync(join(dir, "nginx.conf"), `pid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\nevents {}\nhttp { include ${dir}/site.conf; }\n`);
      const result = spawnSync(NGINX, ["-t", "-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf")], { encoding: "utf8" });
      expect(result.status, result.stderr).to.equal(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("every metric the Grafana dashboard queries is exported by one of the apps", async () => {
    const dashboard = JSON.parse(readFileSync(deploy("grafana", "torchserve-node.json"), "utf8")) as {
      panels: { targets: { expr: string }[] }[];
    };
    const text = createApp(new BatchEngine({ auto: true }));
    const recsys = createRecsysApp({ recommend: () => ({ items: [], fallback: false }) });
    const names = new Set<string>();
    for (const app of [text, recsys]) {
      const running = await listen(app);
      try {
        const exposition = parseExposition(await (await fetch(`${running.base}/metrics`)).text());
        for (const name of exposition.types.keys()) names.add(name);
        for (const sample of exposition.samples) names.add(sample.name);
      } finally {
        await running.close();
      }
    }
    const queried = dashboard.panels.flatMap((panel) => panel.targets.map((target) => target.expr));
    expect(queried.length).to.be.greaterThan(5);
    for (const expr of queried) {
      const metrics = [...expr.matchAll(/\b([a-z_:][a-z0-9_:]*)(?=[{[])/g)].map((m) => m[1]!).filter((m) => !["by", "rate", "sum"].includes(m));
      const inExpr = metrics.length ? metrics : [...expr.matchAll(/\b([a-z_]+_[a-z0-9_]+)\b/g)].map((m) => m[1]!);
      for (const metric of inExpr) expect(names.has(metric) || names.has(metric.replace(/_bucket$/, "")), `${metric} in ${expr}`).to.equal(true);
    }
  });
});
