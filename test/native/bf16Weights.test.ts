/**
 * bf16 matrices read where they lie on every kernel family (SERVICE_BF16_WEIGHTS=in-place,
 * docs/operations.md): the suite's own runs pack them (the default). The bf16 checkpoints' native
 * arms of llama.test run again here, in a child process, with the setting: greedy tokens against
 * the reference, a batch against each row alone, the prefix cache, and the load's note saying
 * the matrices were read in place.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "../helpers/fixtures.js";

describe("bf16 weights read in place on every kernel family", function () {
  this.timeout(900000);

  it("the bf16 checkpoints' native arms pass under SERVICE_BF16_WEIGHTS=in-place", () => {
    const run = spawnSync(
      process.execPath,
      [
        join(repoRoot, "node_modules", "mocha", "bin", "mocha.js"),
        "--no-config",
        "--timeout",
        "600000",
        "--reporter",
        "dot",
        "--grep",
        "bf16, native",
        join(repoRoot, "dist", "test", "native", "llama.test.js"),
      ],
      { cwd: repoRoot, env: { ...process.env, SERVICE_BF16_WEIGHTS: "in-place" }, encoding: "utf8", maxBuffer: 64 << 20 },
    );
    const output = `${run.stdout}${run.stderr}`;
    expect(run.status, output.slice(-6000)).to.equal(0);
    // Two bf16 checkpoints (llama-gqa-bf16, gpt-bf16), each on every family this CPU runs.
    const passing = Number(/(\d+) passing/.exec(output)?.[1] ?? 0);
    expect(passing, output.slice(-2000)).to.equal(2 * loadAddon().kernelFamilies.length);
    expect(output).to.not.match(/\d+ failing/);
  });
});
