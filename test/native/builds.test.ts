/**
 * Both build systems produce a working addon: cmake-js (CMakeLists.txt, the primary build)
 * and node-gyp (binding.gyp). Each is loaded in a child process and must reproduce a golden
 * greedy continuation, running on the libtorch scripts/torch-paths.mjs found (the files the
 * process maps, so both builds run on the same one). `bash scripts/setup.sh --test` builds both.
 */
import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { join } from "node:path";

import { fixture, goldenFor, repoRoot } from "../helpers/fixtures.js";

const builds = {
  "cmake-js (CMakeLists.txt)": join(repoRoot, "build", "Release", "torchserve.node"),
  "node-gyp (binding.gyp)": join(repoRoot, "build-gyp", "build", "Release", "torchserve.node"),
};

const probe = `
const { createRequire } = require("node:module");
const addon = require(process.env.TORCHSERVE_ADDON);
const [ckpt, prompt, max] = process.argv.slice(1);
(async () => {
  const model = await addon.loadLanguageModel(ckpt, { device: "cpu", threads: 1 });
  const { runtime } = await model.configure({ contextLength: 64, eosTokenIds: [257], runtime: "auto", architecture: "gpt" });
  const [out] = await model.generate([{ tokens: Int32Array.from(JSON.parse(prompt)), maxNewTokens: Number(max), sampling: { temperature: 0, topK: 0, seed: -1 } }], null).result;
  await model.dispose();
  // The libtorch this process runs on: the files the dynamic loader mapped.
  const maps = require("node:fs").readFileSync("/proc/self/maps", "utf8").split("\\n");
  const libtorch = [...new Set(maps.map((line) => line.split(/\\s+/)[5]).filter((path) => /\\/libtorch_cpu\\.so/.test(path ?? "")))];
  console.log(JSON.stringify({ runtime, out: Array.from(out), libtorch }));
})().catch((err) => { console.error(err); process.exit(1); });
`;

describe("addon builds", function () {
  this.timeout(60000);
  const c = goldenFor("tiny-gpt.pt").cases[0]!;
  const discovered = JSON.parse(
    execFileSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), "--json"], { encoding: "utf8" }),
  ) as { lib: string };
  const libtorchCpu = realpathSync(join(discovered.lib, "libtorch_cpu.so"));
  for (const [name, path] of Object.entries(builds)) {
    it(`${name} loads, reproduces the reference and runs on the discovered libtorch`, () => {
      expect(existsSync(path), `${path} is missing: run \`bash scripts/setup.sh --test\``).to.equal(true);
      const stdout = execFileSync(
        process.execPath,
        ["-e", probe, fixture("tiny-gpt.pt"), JSON.stringify(c.prompt_ids), String(c.max_new_tokens)],
        { env: { ...process.env, TORCHSERVE_ADDON: path, OMP_WAIT_POLICY: "PASSIVE" }, encoding: "utf8" },
      );
      const result = JSON.parse(stdout) as { runtime: string; out: number[]; libtorch: string[] };
      expect(result.runtime).to.equal("native");
      expect(result.out).to.deep.equal(c.output_ids);
      expect(result.libtorch).to.deep.equal([libtorchCpu]);
    });
  }
});
