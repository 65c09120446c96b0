/**
 * deploy/ on real parts: the committed nginx config (Debian nginx) in front of two replicas of
 * the real server entry sharing one redis-server, all on loopback. One rate limit across the
 * replicas, keyed by the address nginx saw; streams through the proxy intact and unbuffered
 * (measured against nginx's buffering defaults as a control);
 * a replica drained with SIGTERM under load without a failed request.
 */
import { expect } from "chai";
import { existsSync } from "node:fs";

import { ServerProcess } from "../e2e/serverProcess.js";
import { join } from "node:path";
import { repoRoot } from "../helpers/fixtures.js";
import { parseExposition, valueOf } from "../helpers/metrics.js";
import { startRedis, type RedisProcess } from "../helpers/redis.js";
import { send } from "./client.js";
import { NGINX, startNginx, swap, type NginxProcess } from "./nginx.js";

const BURST = 6;

async function generated(base: string): Promise<number> {
  const exposition = parseExposition(await (await fetch(`${base}/metrics`)).text());
  return valueOf(exposition, "http_requests_total", { method: "POST", route: "/generate", status: "200" });
}

describe("deployment: nginx, two replicas, one Redis (deploy/)", function () {
  this.timeout(120_000);
  let redis: RedisProcess;
  let replicas: ServerProcess[] = [];
  let bases: { text: string; recsys: string }[] = [];
  let nginx: NginxProcess;
  let ports: { text: number; recsys: number }[] = [];

  before(async function () {
    if (!existsSync(NGINX)) throw new Error(`${NGINX} is missing: run bash scripts/setup.sh --test`);
    redis = await startRedis();
    const env = {
      // The demo model: it writes long streams (no early end), which the buffering check needs.
      SERVICE_CKPT: join(repoRoot, "models", "brown-gpt.pt"),
      SERVICE_THREADS: "1",
      REDIS_URL: redis.url,
      TRUST_PROXY: "loopback",
      // A bucket that does not refill within the test: counts are exact.
      RATE_LIMIT_PER_SECOND: "0.001",
      RATE_LIMIT_BURST: String(BURST),
    };
    replicas = [new ServerProcess(env), new ServerProcess(env)];
    bases = await Promise.all(replicas.map((replica) => replica.ready()));
    ports = bases.map((base) => ({ text: Number(new URL(base.text).port), recsys: Number(new URL(base.recsys).port) }));
    nginx = await startNginx([ports[0]!, ports[1]!]);
  });

  after(async () => {
    await nginx?.stop();
    await Promise.all(replicas.map((replica) => replica.stop()));
    await redis?.stop();
  });

  it("one rate limit across both replicas, keyed by the client address nginx saw (a client's X-Forwarded-For is not believed)", async () => {
    const before = await Promise.all(bases.map((base) => generated(base.text)));
    const statuses: number[] = [];
    for (let i = 0; i < BURST + 4; i += 1) {
      const answer = await send(nginx.textPort, "/generate", { body: { prompt: "a", max_new_tokens: 1 }, from: "127.0.0.2" });
      statuses.push(answer.status);
    }
    expect(statuses).to.deep.equal([...Array(BURST).fill(200), 429, 429, 429, 429]);
    // Round robin: both replicas served part of the one budget.
    const after = await Promise.all(bases.map((base) => generated(base.text)));
    expect(after[0]! - before[0]!).to.be.greaterThan(0);
    expect(after[1]! - before[1]!).to.be.greaterThan(0);
    expect(after[0]! - before[0]! + after[1]! - before[1]!).to.equal(BURST);

    const spoofed = await send(nginx.textPort, "/generate", {
      body: { prompt: "a", max_new_tokens: 1 }, from: "127.0.0.2", headers: { "x-forwarded-for": "203.0.113.9" },
    });
    expect(spoofed.status).to.equal(429);
    expect(spoofed.headers["retry-after"]).to.match(/^\d+$/);
    const other = await send(nginx.textPort, "/generate", { body: { prompt: "a", max_new_tokens: 1 }, from: "127.0.0.3" });
    expect(other.status).to.equal(200);
    // The recommender's server shares the limiter and its Redis too.
    expect((await send(nginx.recsysPort, "/recommend/1?k=3", { from: "127.0.0.3" })).status).to.equal(200);
  });

  it("streams arrive through the proxy intact: the replica's own event sequence, ending in [DONE]", async () => {
    const body = { prompt: "The house", max_new_tokens: 120, seed: 3 };
    const direct = await send(Number(new URL(bases[0]!.text).port), "/generate/stream", { body, from: "127.0.0.4" });
    expect(direct.status).to.equal(200);
    // Twice: round robin sends one to each replica.
    for (const from of ["127.0.1.1", "127.0.1.2"]) {
      const proxied = await send(nginx.textPort, "/generate/stream", { body, from });
      expect(proxied.status).to.equal(200);
      expect(proxied.headers["content-type"]).to.match(/text\/event-stream/);
      expect(proxied.headers["x-request-id"]).to.be.a("string");
      expect(proxied.body).to.equal(direct.body);
      expect(proxied.body.split("\n\n").filter(Boolean).length).to.be.greaterThan(10);
      expect(proxied.body.endsWith("data: [DONE]\n\n")).to.equal(true);
    }
  });

  it("streams are unbuffered through the shipped config without the app's X-Accel-Buffering; nginx's defaults, the control, are seen to buffer", async () => {
    // A stream of 512 pieces of ~20 bytes. Passed on as they come, the client's socket
    // delivers them in hundreds of reads (a few coalesce); held in nginx's 4 KiB buffers, in
    // a handful. The line between is drawn at a tenth of the events, far from both.
    const body = { prompt: "The house", max_new_tokens: 512, seed: 5 };
    const direct = await send(Number(new URL(bases[0]!.text).port), "/generate/stream", { body, from: "127.0.0.5" });
    const events = direct.body.split("\n\n").filter(Boolean).length;
    expect(events).to.equal(513);
    const ignoreHint = (site: string): string =>
      swap(site, "proxy_buffering off;", "proxy_buffering off;\n        proxy_ignore_headers X-Accel-Buffering;");
    // nginx's defaults for a location: HTTP/1.0 to the upstream (so no chunked framing) and
    // buffering on; the app's hint ignored, as a proxy that does not know it would.
    const defaults = (site: string): string =>
      swap(site, "proxy_buffering off;", "proxy_buffering on;\n        proxy_http_version 1.0;\n        proxy_ignore_headers X-Accel-Buffering;");
    const reads: Record<string, number> = {};
    for (const [name, edit] of [["shipped", ignoreHint], ["defaults", defaults]] as const) {
      const proxy = await startNginx([ports[0]!, ports[1]!], edit);
      try {
        const proxied = await send(proxy.textPort, "/generate/stream", { body, from: "127.0.0.6" });
        expect(proxied.body, name).to.equal(direct.body);
        reads[name] = proxied.reads.length;
      } finally {
        await proxy.stop();
      }
    }
    console.log(`      ${events} events, ${direct.body.length} bytes: ${reads["shipped"]} reads through the shipped config, ${reads["defaults"]} through nginx's defaults`);
    expect(reads["shipped"]).to.be.at.least(events / 10);
    expect(reads["defaults"]).to.be.below(events / 10);
  });

  it("a replica drained with SIGTERM under load: no request fails, nginx moves to the other, the drained one exits 0", async () => {
    const clients = 24;
    const perClient = BURST - 1;
    const statuses = new Map<number, number>();
    let answered = 0;
    let drained: Promise<unknown> | undefined;
    const drainAfter = Math.floor((clients * perClient) / 3);
    const client = async (index: number): Promise<void> => {
      for (let i = 0; i < perClient; i += 1) {
        const answer = await send(nginx.textPort, "/generate", {
          body: { prompt: "Once", max_new_tokens: 16, seed: i },
          from: `127.0.2.${index + 1}`,
        });
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        answered += 1;
        // A third of the way in, the first replica is told to stop, with requests in flight.
        if (answered === drainAfter) drained = replicas[0]!.stop();
      }
    };
    await Promise.all(Array.from({ length: clients }, (_, index) => client(index)));
    const exit = await drained;
    expect(Object.fromEntries(statuses), nginx.errorLog()).to.deep.equal({ 200: clients * perClient });
    expect(exit).to.deep.equal({ code: 0, signal: null });
    expect(replicas[0]!.log.some((line) => line.msg === "stopped")).to.equal(true);
    // The survivor is ready and took the rest.
    expect((await fetch(`${bases[1]!.text}/ready`)).status).to.equal(200);
    console.log(`      drain under load: ${clients * perClient} requests, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  });
});
