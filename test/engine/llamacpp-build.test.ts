// The benchmark's llama.cpp arm loads the CPU build it is asked for (scripts/bench/lib/llamaCppBuild.ts):
// on an AVX-512 host ggml's own pick is an AVX-512 build, so timing our avx2 kernels like for
// like needs its AVX2 build (haswell) instead.
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { llamaCppCpuBuilds, matchingLlamaCppBuild } from "../../scripts/bench/lib/llamaCppBuild.js";
import { repoRoot } from "../helpers/fixtures.js";

describe("vs-llamacpp: which llama.cpp CPU build runs", () => {
  it("matches one kernel family with llama.cpp's build for its instruction set, and leaves several to ggml", () => {
    expect(matchingLlamaCppBuild(["avx2"])).to.equal("haswell");
    expect(matchingLlamaCppBuild(["avx2", "avx2"])).to.equal("haswell");
    expect(matchingLlamaCppBuild(["amx"])).to.equal("sapphirerapids");
    expect(matchingLlamaCppBuild(["avx512_bf16"])).to.equal("cooperlake");
    expect(matchingLlamaCppBuild(["avx512"])).to.equal("skylakex");
    expect(matchingLlamaCppBuild(["baseline"])).to.equal("x64");
    expect(matchingLlamaCppBuild(["avx512_bf16", "avx512"])).to.equal(undefined);
    expect(matchingLlamaCppBuild(["avx512", "avx2"])).to.equal(undefined);
    expect(matchingLlamaCppBuild([])).to.equal(undefined);
    // Every build named is one the installed package ships.
    for (const family of ["amx", "avx512_bf16", "avx512", "avx2", "baseline"]) {
      expect(llamaCppCpuBuilds()).to.include(matchingLlamaCppBuild([family]));
    }
  });

  it("loads only the build asked for, and removes its copy at exit", function () {
    this.timeout(60_000);
    // Its AVX2 build where the CPU runs it (ggml's own pick on such a CPU is that or better), else
    // the plain x86-64 one.
    const build = /\bavx2\b/.test(readFileSync("/proc/cpuinfo", "utf8")) ? "haswell" : "x64";
    const helper = pathToFileURL(join(repoRoot, "dist", "scripts", "bench", "lib", "llamaCppBuild.js")).href;
    const script = `
      const { importNodeLlamaCpp } = await import(${JSON.stringify(helper)});
      const { module } = await importNodeLlamaCpp(${JSON.stringify(build)});
      const llama = await module.getLlama({ gpu: false, build: "never", logLevel: module.LlamaLogLevel.debug, maxThreads: 0 });
      await llama.dispose();`;
    // A file, not --eval: node-llama-cpp tests its binary in a child given this process's flags.
    const dir = mkdtempSync(join(tmpdir(), "llamacpp-build-test-"));
    const file = join(dir, "load.mjs");
    writeFileSync(file, script);
    const run = spawnSync(process.execPath, [file], { encoding: "utf8" });
    rmSync(dir, { recursive: true, force: true });
    const out = `${run.stdout}${run.stderr}`;
    expect(run.status, out).to.equal(0);
    const loaded = /loaded CPU backend from (\S+)/.exec(out);
    expect(loaded, out).to.not.equal(null);
    expect(loaded![1]).to.match(new RegExp(`libggml-cpu-${build}\\.so$`));
    expect(existsSync(loaded![1]!), "the temporary copy is removed at exit").to.equal(false);
  });

  it("refuses a build the package does not ship, naming those it does", async () => {
    const { importNodeLlamaCpp } = await import("../../scripts/bench/lib/llamaCppBuild.js");
    let message = "";
    try {
      await importNodeLlamaCpp("no-such-cpu");
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).to.match(/no CPU build "no-such-cpu" \(it ships: .*haswell/);
  });
});
