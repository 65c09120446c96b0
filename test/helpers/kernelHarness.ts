/**
 * Kernel test programs (test/native/cpp/*.cc) built from the addon's own kernel sources with the
 * compiler that builds the addon, unoptimised (what they check is the intrinsics' arithmetic,
 * which -O0 keeps, and no second build of the addon is needed), and their per-family report
 * checked: each program prints "FAMILY: N cases, 0 differ" or "FAMILY: skipped, not on this CPU".
 */
import { expect } from "chai";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { repoRoot } from "./fixtures.js";

const require = createRequire(import.meta.url);

const KERNEL_UNITS = ["native/kernels/Kernels.cc", "native/kernels/ThreadTeam.cc", "native/common/MappedFile.cc"];

export interface HarnessOptions {
  /** The translation units built with the program, relative to the repository root (default: the kernels'). */
  units?: readonly string[];
  /** Flags after the defaults, for compiling and linking both (e.g. `-O1` and sanitizers). */
  flags?: readonly string[];
}

/**
 * Compiles test/native/cpp/`program` with the kernels' translation units (or `options.units`) into
 * `dir`; returns the executable.
 */
export async function buildKernelHarness(program: string, dir: string, options: HarnessOptions = {}): Promise<string> {
  const napi = execFileSync(process.execPath, [join(repoRoot, "scripts", "torch-paths.mjs"), "--node-addon-api"], {
    encoding: "utf8",
  }).trim();
  const napiHeaders = join(dirname(require.resolve("node-api-headers/package.json")), "include");
  const extraFlags = options.flags ?? [];
  const flags = ["-O0", "-std=c++17", "-Wno-psabi", `-I${join(repoRoot, "native")}`, `-I${napi}`, `-I${napiHeaders}`, ...extraFlags];
  const units = [
    join(repoRoot, "test", "native", "cpp", program),
    ...(options.units ?? KERNEL_UNITS).map((unit) => join(repoRoot, unit)),
  ];
  const objects = units.map((_, i) => join(dir, `${i}.o`));
  await Promise.all(
    units.map(
      (unit, i) =>
        new Promise<void>((resolve, reject) => {
          const child = spawn("g++", [...flags, "-c", unit, "-o", objects[i]!], { stdio: ["ignore", "ignore", "pipe"] });
          let stderr = "";
          child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
          child.on("error", reject);
          child.on("close", (code: number) => (code === 0 ? resolve() : reject(new Error(`g++ ${unit}: ${stderr}`))));
        }),
    ),
  );
  // The Node-API functions the kernels' headers name are never called here: empty stubs.
  const undefinedSymbols = execFileSync("nm", ["-u", ...objects], { encoding: "utf8" });
  const napiSymbols = [...new Set(undefinedSymbols.split("\n").map((l) => l.trim().split(/\s+/).pop() ?? ""))].filter((s) =>
    s.startsWith("napi_"),
  );
  writeFileSync(join(dir, "stubs.c"), napiSymbols.map((s) => `void ${s}(void) {}\n`).join(""));
  execFileSync("gcc", ["-c", join(dir, "stubs.c"), "-o", join(dir, "stubs.o")]);
  const executable = join(dir, "check");
  execFileSync("g++", [...extraFlags, ...objects, join(dir, "stubs.o"), "-o", executable, "-lpthread"]);
  return executable;
}

/**
 * Runs the harness and holds its report: exit 0, every line a family's clean result or a skip,
 * and every family this CPU can run (read apart from /proc/cpuinfo, so a harness that skipped
 * one it could run fails) among those that ran.
 */
export function expectEveryFamilyClean(executable: string): void {
  const run = spawnSync(executable, { encoding: "utf8" });
  expect(run.status, `${run.stdout}${run.stderr}`).to.equal(0);
  const lines = run.stdout.trim().split("\n");
  const ran = lines.filter((l) => /: \d+ cases, 0 differ$/.test(l)).map((l) => l.split(":")[0]);
  expect(ran).to.include("baseline");
  const cpu = readFileSync("/proc/cpuinfo", "utf8");
  if (/\bavx2\b/.test(cpu)) expect(ran).to.include("avx2");
  if (/\bavx512bw\b/.test(cpu)) expect(ran).to.include("avx512");
  if (/\bavx512_bf16\b/.test(cpu)) expect(ran).to.include.members(["avx512_bf16", "amx"]);
  expect(lines.filter((l) => !/: \d+ cases, 0 differ$|: skipped, not on this CPU$/.test(l))).to.deep.equal([]);
}

/**
 * A suite of one test, `claim`: test/native/cpp/`program` built in a directory of its own and its
 * report held to expectEveryFamilyClean.
 */
export function describeEveryFamily(title: string, claim: string, program: string): void {
  describe(title, function () {
    this.timeout(300000);
    let dir = "";
    before(() => {
      dir = mkdtempSync(join(tmpdir(), `${program.replace(/\.cc$/, "")}-`));
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it(claim, async () => {
      expectEveryFamilyClean(await buildKernelHarness(program, dir));
    });
  });
}
