/**
 * The other CPU vendor's kernel variants (SERVICE_CPU_VENDOR, docs/operations.md "Kernel
 * variants by CPU vendor"). Intel and AMD CPUs run different Q4_K products within a family (the
 * avx2 groups' broadcast loads or shuffles; the AVX-512 families' interleaved groups or the
 * rows' pair kernels), and the suite's own runs reach only this CPU's. So the quantized-model
 * suites run again here, in a child process, under the vendor this CPU is not: their greedy
 * tokens against llama.cpp's on the same GGUF bytes, each family's batch against the row
 * alone, and the layout files, with the rows the other vendor rewrites (regroupsQ4K reads the
 * variable too).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

describe("the other CPU vendor's kernel variants", function () {
  this.timeout(900000);
  const intel = /^vendor_id\s*:\s*GenuineIntel$/m.test(readFileSync("/proc/cpuinfo", "utf8"));
  const other = intel ? "amd" : "intel";

  it(`the quantized-model suites pass under SERVICE_CPU_VENDOR=${other}`, () => {
    const suites = ["native/llama.test.js", "engine/gguf-quantized.test.js", "native/layoutCache.test.js"].map((s) =>
      join(repoRoot, "dist", "test", s),
    );
    const run = spawnSync(
      process.execPath,
      [join(repoRoot, "node_modules", "mocha", "bin", "mocha.js"), "--no-config", "--timeout", "600000", "--reporter", "dot", ...suites],
      { cwd: repoRoot, env: { ...process.env, SERVICE_CPU_VENDOR: other }, encoding: "utf8", maxBuffer: 64 << 20 },
    );
    const output = `${run.stdout}${run.stderr}`;
    expect(run.status, output.slice(-6000)).to.equal(0);
    expect(output).to.match(/\d+ passing/);
    expect(output).to.not.match(/\d+ failing/);
    // A test those suites skip (layoutCache's, on a disk nearly full) is shown, not hidden.
    const pending = /(\d+) pending/.exec(output);
    if (pending) console.log(`    (${pending[1]} pending under SERVICE_CPU_VENDOR=${other}: ${output.match(/\(skipped: [^)]*\)/g)?.join(" ") ?? ""})`);
  });
});
