/**
 * The kernel families' vector quantization of activations gives the scalar form's bytes
 * (test/native/cpp/quantize-activations.cc): built here from the addon's own kernel sources with
 * the compiler that builds the addon, then run. Every family this CPU can run is checked (which
 * ones, read apart from /proc/cpuinfo, so a harness that skipped one it could run fails); the
 * others are reported as skipped.
 */
import { expect } from "chai";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

const require = createRequire(import.meta.url);

describe("activation quantization on every kernel family", function () {
  this.timeout(300000);
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "quantize-activations-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("gives the scalar quantization's bytes (Q8_0 and Q8_K blocks, ties, NaN, strides)", async () => {
    const napi = execFileSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), "--node-addon-api"], {
      encoding: "utf8",
    }).trim();
    const napiHeaders = join(dirname(require.resolve("node-api-headers/package.json")), "include");
    const flags = ["-O0", "-std=c++17", "-Wno-psabi", `-I${join(repoRoot, "native")}`, `-I${napi}`, `-I${napiHeaders}`];
    // Unoptimised, in parallel: what is checked is the intrinsics' arithmetic, which -O0 keeps.
    const units = [
      join(repoRoot, "test", "native", "cpp", "quantize-activations.cc"),
      join(repoRoot, "native", "kernels", "Kernels.cc"),
      join(repoRoot, "native", "kernels", "ThreadTeam.cc"),
      join(repoRoot, "native", "common", "MappedFile.cc"),
    ];
    const objects = units.map((_, i) => join(dir, `${i}.o`));
    await Promise.all(
      units.map(
        (unit, i) =>
          new Promise<void>((resolve, reject) => {
            const child = spawn("g++", [...flags, "-c", unit, "-o", objects[i]], {
              stdio: ["ignore", "ignore", "pipe"],
            });
            let stderr = "";
            child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
            child.on("error", reject);
            child.on("close", (code: number) => (code === 0 ? resolve() : reject(new Error(`g++ ${unit}: ${stderr}`))));
          }),
      ),
    );
    // The Node-API functions the kernels' headers name are never called here: empty stubs.
    const undefinedSymbols = execFileSync("nm", ["-u", ...objects], { encoding: "utf8" });
    const napiSymbols = [...new Set(undefinedSymbols.split("\n").map((l) => l.trim().split(/\s+/).pop() ?? ""))].filter(
      (s) => s.startsWith("napi_"),
    );
    writeFileSync(join(dir, "stubs.c"), napiSymbols.map((s) => `void ${s}(void) {}\n`).join(""));
    execFileSync("gcc", ["-c", join(dir, "stubs.c"), "-o", join(dir, "stubs.o")]);
    execFileSync("g++", [...objects, join(dir, "stubs.o"), "-o", join(dir, "check"), "-lpthread"]);
    const run = spawnSync(join(dir, "check"), { encoding: "utf8" });
    expect(run.status, `${run.stdout}${run.stderr}`).to.equal(0);
    const lines = run.stdout.trim().split("\n");
    const ran = lines.filter((l) => /: \d+ cases, 0 differ$/.test(l)).map((l) => l.split(":")[0]);
    expect(ran).to.include("baseline");
    const cpu = readFileSync("/proc/cpuinfo", "utf8");
    if (/\bavx2\b/.test(cpu)) expect(ran).to.include("avx2");
    if (/\bavx512bw\b/.test(cpu)) expect(ran).to.include("avx512");
    if (/\bavx512_bf16\b/.test(cpu)) expect(ran).to.include.members(["avx512_bf16", "amx"]);
    expect(lines.filter((l) => !/: \d+ cases, 0 differ$|: skipped, not on this CPU$/.test(l))).to.deep.equal([]);
  });
});
