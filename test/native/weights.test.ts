/**
 * The weights are held once: on the native runtime, with releaseModuleWeights (what TorchEngine
 * asks for), the TorchScript module's parameters are released once the native runtime has packed
 * its own copy, and that copy is the checkpoint's size in its own dtype (no float32 copy of a
 * 16-bit checkpoint, the embedding table read from a tied head). Counted by the addon's
 * weightBytes() (each storage once), on the tiny checkpoints of make_hf_fixture.py --native-set
 * (float32, bf16 and fp16 llama; bf16 GPT with its tied head; q/k/v biases with a tied head).
 * Greedy output after the release still agrees with the Python reference as in llama.test.ts.
 */
import { expect } from "chai";
import { join } from "node:path";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { loadAddon } from "../../src/native/binding.js";
import type { RawLanguageModel, RawTensor } from "../../src/native/types.js";
import { agreedSteps, greedy, nativeFixtureSet, type ReferenceCheckpoint } from "../helpers/nativeSet.js";
import { rejection } from "../helpers/rejection.js";

const addon = loadAddon();

describe("weights held once", function () {
  this.timeout(300000);
  let reference: Record<string, ReferenceCheckpoint>;

  before(function () {
    this.timeout(600000); // the set includes quantized exports (Q4_K is slow to quantize); made once per process
    reference = nativeFixtureSet();
  });

  async function load(name: string): Promise<{ model: RawLanguageModel; checkpoint: ReferenceCheckpoint; config: Record<string, unknown> }> {
    const checkpoint = reference[name]!;
    const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
    return { model, checkpoint, config };
  }

  for (const name of ["llama-gqa", "llama-gqa-bf16", "llama-gqa-fp16", "qwen-bias-tied", "gpt-bf16"]) {
    it(`${name}: native with releaseModuleWeights holds one copy of the checkpoint's size, and still generates the reference`, async () => {
      const { model, checkpoint, config } = await load(name);
      try {
        const loaded = await model.weightBytes();
        expect(loaded.runtime).to.equal(0);
        expect(loaded.module).to.be.above(0);
        const choice = await model.configure({
          contextLength: 64,
          eosTokenIds: [],
          runtime: "native",
          architecture: checkpoint.architecture,
          dtype: checkpoint.dtype,
          modelConfig: config,
          releaseModuleWeights: true,
        });
        expect(choice.runtime).to.equal("native");
        const held = await model.weightBytes();
        // What stays of the module is its buffers (the rotary frequencies, GPT's masks): none of the weights.
        expect(held.module, "module bytes after release").to.be.below(loaded.module * 0.05);
        // The packed copy is the checkpoint's size: 16-bit stays 16-bit, a tied table is held
        // once. (Padding the output width to 16 and float32 norms, biases and rotary tables add
        // a little on these tiny shapes.)
        expect(held.runtime, "packed bytes").to.be.within(0.85 * loaded.module, 1.3 * loaded.module);

        const tolerance = checkpoint.dtype === "float32" ? 1e-3 : 2e-2;
        let compared = 0;
        let total = 0;
        for (const c of checkpoint.cases) {
          const [out] = await model.generate([greedy(c)], null).result;
          compared += agreedSteps(c, Array.from(out!), tolerance, name);
          total += c.output_ids.length;
        }
        expect(compared, `${name}: steps compared`).to.be.at.least(total / 2);

        // The module cannot be configured again (its weights are gone), and says so.
        const again = await rejection(model.configure({ contextLength: 64, runtime: "torchscript", dtype: checkpoint.dtype }));
        expect(again.code).to.equal("ERR_INVALID_ARGUMENT");
        expect(again.message).to.include("released");
        // Methods that need no weights still run; the forward says why it cannot.
        expect(await model.run("interface_version", [])).to.equal(1);
        const shape = (await model.run("cache_shape", [1])) as number[];
        const long = (values: number[]): RawTensor => ({ dtype: "int64", shape: [values.length], data: BigInt64Array.from(values.map(BigInt)) });
        const forward = await rejection(
          model.run("forward", [
            { dtype: "int64", shape: [1, 1], data: BigInt64Array.from([1n]) },
            long([0]),
            long([1]),
            { dtype: "float32", shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) },
          ]),
        );
        expect(forward.message).to.include("released");
      } finally {
        await model.dispose();
      }
    });
  }

  it("keeps the module's weights, unchanged, where they are still needed: without the flag, and on the TorchScript runtime", async () => {
    const { model, checkpoint, config } = await load("llama-gqa-bf16");
    try {
      const settings = { contextLength: 64, architecture: "llama", dtype: checkpoint.dtype, modelConfig: config };
      const loaded = await model.weightBytes();
      await model.configure({ ...settings, runtime: "native" });
      const both = await model.weightBytes();
      expect(both.module).to.equal(loaded.module);
      expect(both.runtime).to.be.above(0.85 * loaded.module);
      // Reconfiguring drops the native copy before choosing again.
      await model.configure({ ...settings, runtime: "torchscript", torchscriptCompute: "checkpoint", releaseModuleWeights: true });
      expect(await model.weightBytes()).to.deep.equal({ module: loaded.module, runtime: 0 });
      // The load-time check widened the bf16 parameters to float32 in place and narrowed them
      // back: the TorchScript forward computes exactly what it computes on a fresh load.
      const fresh = await load("llama-gqa-bf16");
      try {
        await fresh.model.configure({ ...settings, runtime: "torchscript", torchscriptCompute: "checkpoint" });
        for (const c of checkpoint.cases.slice(0, 2)) {
          const [after] = await model.generate([greedy(c)], null).result;
          const [untouched] = await fresh.model.generate([greedy(c)], null).result;
          expect(Array.from(after!)).to.deep.equal(Array.from(untouched!));
        }
      } finally {
        await fresh.model.dispose();
      }
    } finally {
      await model.dispose();
    }
  });

  it("rejects a releaseModuleWeights that is not a boolean", async () => {
    const { model } = await load("llama-gqa");
    try {
      const bad = await rejection(model.configure({ contextLength: 64, releaseModuleWeights: "yes" as never }));
      expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
      expect(bad.message).to.include("releaseModuleWeights");
    } finally {
      await model.dispose();
    }
  });

  it("TorchEngine on the native runtime holds the weights once and serves", async () => {
    const checkpoint = reference["llama-gqa-bf16"]!;
    const engine = await TorchEngine.load(checkpoint.file, { runtime: "native", threads: 1 });
    try {
      const memory = await engine.weightMemory();
      expect(memory.runtimeBytes).to.be.above(0);
      expect(memory.moduleBytes).to.be.below(memory.runtimeBytes * 0.05);
      const [text] = await engine.generateBatch([{ prompt: "abc", maxNewTokens: 4, temperature: 0, topK: null }]);
      expect(text).to.be.a("string");
    } finally {
      await engine.dispose();
    }
  });
});
