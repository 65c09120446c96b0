/**
 * The KV cache takes the checkpoint's dtype: a bf16 or fp16 checkpoint caches keys and values
 * in 16 bits on both runtimes (half the bytes per row of its float32 export), and the default
 * stream limit (capacity()) counts rows of that size, so a 16-bit model admits twice the rows
 * in the same SERVICE_KV_BUDGET_MB. A quantized checkpoint (float32 activations) caches in bf16
 * on the native runtime, as llama.cpp caches in f16. Greedy agreement of the 16-bit caches with
 * the reference is in test/native/llama.test.ts and TorchEngine-hf.test.ts; of the quantized
 * checkpoints' in llama.test.ts and gguf-quantized.test.ts.
 */
import { expect } from "chai";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { exportHfDtypes, type HfCheckpoints } from "../helpers/hfModels.js";

const dtypes = ["float32", "bfloat16", "float16"] as const;

/** Bytes of one row of cache with `element`-byte keys and values: every layer's, at full context (16-position tiles). */
function rowBytes(engine: TorchEngine, element: number): number {
  const raw = engine.config.raw as { n_layer: number; n_kv_head: number; head_dim: number };
  return 2 * raw.n_layer * raw.n_kv_head * raw.head_dim * Math.ceil(engine.config.contextLength / 16) * 16 * element;
}

describe("KV cache in the checkpoint's dtype", function () {
  this.timeout(180_000);
  let exported: HfCheckpoints;

  before(() => {
    exported = exportHfDtypes("llama-gqa", [...dtypes, "q8_0"]);
  });
  after(() => exported?.cleanup());

  for (const runtime of ["native", "torchscript"] as const) {
    it(`${runtime}: a 16-bit checkpoint's row of cache is half its float32 row, and capacity() doubles`, async () => {
      const bytes: Record<string, number> = {};
      const rows: Record<string, number> = {};
      for (const dtype of dtypes) {
        // The TorchScript runtime computes in the checkpoint's dtype here whatever the CPU
        // (by default it widens 16-bit checkpoints where the CPU has no fast 16-bit matmuls).
        const engine = await TorchEngine.load(exported.path(dtype), { threads: 1, runtime, torchscriptCompute: "checkpoint" });
        try {
          expect(engine.runtime).to.equal(runtime);
          expect(engine.kvBytesPerRow, dtype).to.equal(rowBytes(engine, dtype === "float32" ? 4 : 2));
          bytes[dtype] = engine.kvBytesPerRow;
        } finally {
          await engine.dispose();
        }
        const sized = await TorchEngine.load(exported.path(dtype), { threads: 1, runtime, torchscriptCompute: "checkpoint", kvBudgetMb: 1 });
        try {
          rows[dtype] = sized.capacity().maxActiveRows;
        } finally {
          await sized.dispose();
        }
      }
      expect(bytes.bfloat16! * 2).to.equal(bytes.float32);
      expect(bytes.float16! * 2).to.equal(bytes.float32);
      const float32Rows = Math.floor(2 ** 20 / bytes.float32!);
      expect(float32Rows).to.be.within(8, 128);  // inside capacity()'s clamp, doubled too
      expect(rows).to.deep.equal({ float32: float32Rows, bfloat16: 2 * float32Rows, float16: 2 * float32Rows });
    });
  }

  it("native: a quantized checkpoint's row of cache is bf16, half its float32 row, and capacity() doubles; the TorchScript runtime's stays float32", async () => {
    for (const runtime of ["native", "torchscript"] as const) {
      const engine = await TorchEngine.load(exported.path("q8_0"), { threads: 1, runtime, kvBudgetMb: 1 });
      try {
        expect(engine.runtime).to.equal(runtime);
        const float32Row = rowBytes(engine, 4);
        expect(engine.kvBytesPerRow, runtime).to.equal(runtime === "native" ? float32Row / 2 : float32Row);
        const float32Rows = Math.floor(2 ** 20 / float32Row);
        expect(engine.capacity().maxActiveRows, runtime).to.equal(runtime === "native" ? 2 * float32Rows : float32Rows);
      } finally {
        await engine.dispose();
      }
    }
  });
});
