/**
 * Both build systems produce a working addon: cmake-js (CMakeLists.txt, the primary build)
 * and node-gyp (binding.gyp). Each is loaded in a child process and must reproduce a golden
 * greedy continuation, running on the libtorch scripts/torch-paths.mjs found (the files the
 * process maps, so both builds run on the same one). `bash scripts/setup.sh --test` builds both.
 * Each also builds the addon without libtorch beside it (torchserve-native.node): it links
 * nothing of libtorch and names none of its symbols, and, in a process that never loads
 * libtorch, serves the checkpoint the libtorch addon checked, with the same tokens.
 */
import { expect } from "chai";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { fixture, goldenFor, repoRoot } from "../helpers/fixtures.js";

const builds = {
  "cmake-js (CMakeLists.txt)": join(repoRoot, "build", "Release", "torchserve.node"),
  "node-gyp (binding.gyp)": join(repoRoot, "build-gyp", "build", "Release", "torchserve.node"),
};

const probe = `
const { createRequire } = require("node:module");
const addon = require(process.env.TORCHSERVE_ADDON);
const [ckpt, prompt, max, loadCheckCache] = process.argv.slice(1);
(async () => {
  const model = await addon.loadLanguageModel(ckpt, { device: "cpu", threads: 1, deferModule: true });
  const { runtime, note } = await model.configure({ contextLength: 64, eosTokenIds: [257], runtime: "auto", architecture: "gpt", loadCheckCache });
  const [out] = await model.generate([{ tokens: Int32Array.from(JSON.parse(prompt)), maxNewTokens: Number(max), sampling: { temperature: 0, topK: 0, seed: -1 } }], null).result;
  await model.dispose();
  // The libtorch this process runs on: the files the dynamic loader mapped.
  const maps = require("node:fs").readFileSync("/proc/self/maps", "utf8").split("\\n");
  const libtorch = [...new Set(maps.map((line) => line.split(/\\s+/)[5]).filter((path) => /\\/libtorch_cpu\\.so/.test(path ?? "")))];
  console.log(JSON.stringify({ runtime, note, out: Array.from(out), libtorch }));
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
      const result = run(path);
      expect(result.runtime).to.equal("native");
      expect(result.out).to.deep.equal(c.output_ids);
      expect(result.libtorch).to.deep.equal([libtorchCpu]);
    });

    it(`${name}: the addon without libtorch beside it serves what the libtorch addon checked, loading no libtorch`, () => {
      const native = join(dirname(path), "torchserve-native.node");
      expect(existsSync(native), `${native} is missing: run \`bash scripts/setup.sh --test\``).to.equal(true);
      const needed = execFileSync("readelf", ["-d", native], { encoding: "utf8" });
      expect(needed).to.not.match(/libtorch|libc10/);
      const symbols = execFileSync("nm", ["-uDC", native], { encoding: "utf8" });
      expect(symbols.split("\n").filter((line) => /c10::|at::|torch::|caffe2::/.test(line))).to.deep.equal([]);
      const cache = mkdtempSync(join(tmpdir(), "tsn-builds-verdicts-"));
      try {
        // Without a remembered verdict (and this fixture stores no reference logits) it cannot:
        // the libtorch addon is for that.
        expect(() => run(native, cache)).to.throw(/ERR_NEEDS_LIBTORCH/);
        const checked = run(path, cache);
        expect(checked.note).to.match(/load-time check ran/);
        const served = run(native, cache);
        expect(served.runtime).to.equal("native");
        expect(served.note).to.match(/weights read from the archive without the TorchScript module/);
        expect(served.out).to.deep.equal(c.output_ids);
        expect(served.libtorch).to.deep.equal([]);
      } finally {
        rmSync(cache, { recursive: true, force: true });
      }
    });
  }

  /** The probe in a child process on the addon at `path` (verdicts remembered in `cache`, if given). */
  function run(path: string, cache?: string): { runtime: string; note: string; out: number[]; libtorch: string[] } {
    const args = ["-e", probe, fixture("tiny-gpt.pt"), JSON.stringify(c.prompt_ids), String(c.max_new_tokens)];
    if (cache !== undefined) args.push(cache);
    const stdout = execFileSync(process.execPath, args, {
      env: { ...process.env, TORCHSERVE_ADDON: path, OMP_WAIT_POLICY: "PASSIVE" },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    return JSON.parse(stdout) as { runtime: string; note: string; out: number[]; libtorch: string[] };
  }
});
