/**
 * scripts/bench/make_bench_models.py's llama-8b builds its quantized checkpoints without a
 * float model (write_tiled: each matrix one quantized block of 256 random rows, repeated). Its
 * files are for load timing, so what must hold is that they load and serve as a user's would:
 * here a small shape built the same way (untied head; Q4_K_M with its Q6_K matrices, and
 * Q8_0) loads on the native runtime, whose load-time check compares its forward with the
 * reference logits the export stored, on the CPU's own kernel family and on avx2 (which lays
 * the Q4_K and Q8_0 rows out anew), and then generates.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamilyCap } from "../../src/native/types.js";
import { regroupsQ4K, repoRoot } from "../helpers/fixtures.js";

const addon = loadAddon();

const makeTiled = `
import sys
sys.path.insert(0, sys.argv[2]); sys.path.insert(0, sys.argv[3])
import make_bench_models as m
from torchserve_node.llama import LlamaConfig
cfg = LlamaConfig(vocab_size=4096, block_size=128, n_layer=2, n_head=4, n_kv_head=2, n_embd=512,
                  intermediate_size=1024, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)
print(m.write_tiled(sys.argv[1], "tiny", cfg, ["q8_0", "q4_k_m"]))
`;

describe("make_bench_models' tiled quantized checkpoints (the llama-8b builder) load and serve on the native runtime", function () {
  this.timeout(300000);
  const dir = mkdtempSync(join(tmpdir(), "tsn-tiled-"));

  before(function () {
    const run = spawnSync("/usr/bin/python3", ["-c", makeTiled, dir, join(repoRoot, "scripts", "bench"), join(repoRoot, "python")], {
      encoding: "utf8",
    });
    expect(run.status, run.stderr).to.equal(0);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  for (const scheme of ["q4_k_m", "q8_0"]) {
    for (const kernels of ["auto", "avx2"] as const satisfies readonly KernelFamilyCap[]) {
      it(`${scheme}, kernels ${kernels}: the load-time check passes against the stored reference, and it generates`, async () => {
        const file = join(dir, `tiny-${scheme}.pt`);
        const model = await addon.loadLanguageModel(file, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          expect(config.quantization).to.equal(scheme);
          const choice = await model.configure({
            contextLength: 64,
            eosTokenIds: [],
            runtime: "native", // throws where the check disagrees
            architecture: String(config.architecture),
            dtype: "float32",
            modelConfig: config,
            kernels,
            loadCheck: "always", // and no verdict directory: this configure runs the check
            releaseModuleWeights: true,
          });
          expect(choice.runtime).to.equal("native");
          expect(choice.note).to.include("load-time check ran (against the reference logits stored at export)");
          if (choice.kernels === "avx2") expect(choice.note).to.include(scheme === "q8_0" ? "Q8_0 rows interleaved" : "Q4_K rows interleaved");
          if (choice.kernels !== "avx2" && scheme !== "q8_0" && regroupsQ4K(choice.kernels)) expect(choice.note).to.include("Q4_K rows interleaved");
          const [out] = await model.generate(
            [{ tokens: Int32Array.from([1, 2, 3, 4]), maxNewTokens: 6, sampling: { temperature: 0, topK: 0, seed: -1 } }],
            null,
          ).result;
          expect(Array.from(out!)).to.have.length(6);
          for (const token of out!) expect(token).to.be.within(0, 4095);
        } finally {
          await model.dispose();
        }
      });
    }
  }
});
