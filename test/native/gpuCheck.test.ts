/**
 * scripts/gpu-check.sh in its CPU mode: the same steps it takes on a GPU host (build check,
 * the device-parametrised engine tests, the Llama set's TorchScript arm, the decode benchmark
 * table), on the CPU, so the script cannot rot on machines without a GPU.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";

describe("scripts/gpu-check.sh --cpu", function () {
  this.timeout(120_000);

  it("runs the device tests and prints the decode table", () => {
    const run = spawnSync("bash", [join(repoRoot, "scripts", "gpu-check.sh"), "--cpu"], {
      cwd: repoRoot,
      encoding: "utf8",
      env: { ...process.env, NODE: process.execPath },
      timeout: 110_000,
    });
    const output = `${run.stdout}\n${run.stderr}`;
    expect(run.status, output).to.equal(0);
    expect(output).to.match(/passing/);
    expect(output).not.to.match(/failing/);
    // The Llama set on the device: 16-bit and quantized checkpoints, each against its reference.
    for (const name of ["llama-gqa-bf16", "llama-gqa-fp16", "qwen-bias-tied-q8_0", "llama-wide-q4_k_m", "llama-wide-q5_k_m"]) {
      expect(output).to.include(`${name}, torchscript: greedy agrees with the reference`);
    }
    // One table row per batch: | batch | prefill ms | decode step ms | tokens/s |
    expect(output).to.match(/^\| 1 \| [\d.]+ \| [\d.]+ \| \d+ \|$/m);
    expect(output).to.match(/^\| 4 \| [\d.]+ \| [\d.]+ \| \d+ \|$/m);
    expect(output).to.include("gpu-check: ok (cpu)");
  });
});
