/**
 * The "llama" architecture on tiny random-weight checkpoints (test/model/python/make_hf_fixture.py
 * --native-set: Hugging Face directories exported by export_hf.py, with grouped-query attention,
 * q/k/v biases with a tied head, Llama 3.1 rope scaling, bf16 and fp16 weights, Q8_0 and the
 * Q4_K_M mix of Q4_K and Q6_K) and the "gpt"
 * fixture rounded to bf16 and fp16, on the native runtime under every kernel family this CPU
 * runs and on the TorchScript runtime: greedy continuations agree with the Python reference
 * (hf_reference.py's uncached float32 forward; the GPT's own forward for the GPT),
 * a batch gives each row what it gets alone, and streamed tokens are the batch's.
 *
 * Agreement: outputs equal the reference token for token, except that they may part at a step
 * where the reference's best two logits are within 2 * tolerance * (largest |logit|) of each
 * other (a near-tie that a difference within the tolerance may flip); after that the sequences
 * are no longer comparable. The reference of a quantized checkpoint is its own dequantizing
 * TorchScript forward (held to 1e-3 on the TorchScript runtime; 2e-2 on the native runtime,
 * which quantizes activations to 8 bits per block as llama.cpp does).
 * Tolerances: float32 1e-3 (the load-time check's); 16-bit on the
 * native runtime 2e-2 (activations rounded to bf16 before the bf16 dot products; see
 * native/runtime/Runtime.cc); 16-bit on the TorchScript runtime 5e-2 (it rounds every activation to
 * 16 bits; on a CPU without fast 16-bit matmuls it computes them in float32: 1e-3). At least
 * half of all steps must be compared, so a broken runtime cannot pass by parting early everywhere.
 * Each prompt is then run again from the prefix cache, held to the same agreement.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamily, RawLanguageModel } from "../../src/native/types.js";
import { readsBf16InPlace, regroupsQ4K, repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, nativeFixtureSet, type ReferenceCheckpoint } from "../helpers/nativeSet.js";
import { rejection } from "../helpers/rejection.js";

const addon = loadAddon();
const cpuFlags = new Set((readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:(.*)$/m)?.[1] ?? "").trim().split(/\s+/));
/** Whether libtorch multiplies bf16 fast here (AVX512_BF16 or AMX), as native/runtime/Runtime.cc decides. */
const fastBf16 = cpuFlags.has("avx512_bf16") || cpuFlags.has("amx_bf16");
const variants = [
  "llama-gqa",
  "qwen-bias-tied",
  "llama3-scaled",
  "llama-gqa-bf16",
  "llama-gqa-fp16",
  "gpt-bf16",
  "gpt-fp16",
  "llama-gqa-q8_0",
  "qwen-bias-tied-q8_0",
  "llama-wide-q4_k_m",
  "llama-gqa-q4_k_m",
  "llama-wide-q4_0",
  "llama-wide-q5_k_m",
];
/**
 * TEST_DEVICE (default "cpu"): the device of the TorchScript arm. scripts/gpu-check.sh runs
 * that arm on "cuda" (the native runtime is the CPU's: its arms run only on "cpu").
 */
const device = process.env.TEST_DEVICE ?? "cpu";
const arms: Array<{ runtime: "native" | "torchscript"; kernels?: KernelFamily }> = [
  ...(device === "cpu" ? addon.kernelFamilies.map((kernels) => ({ runtime: "native" as const, kernels })) : []),
  { runtime: "torchscript" },
];

/** Each case greedily alone, then all in one batch, each held to the reference's tokens; the outputs alone. */
async function greedyAloneAndBatched(model: RawLanguageModel, checkpoint: ReferenceCheckpoint, tolerance: number, label: string): Promise<number[][]> {
  const alone: number[][] = [];
  for (const c of checkpoint.cases) {
    const out = Array.from((await model.generate([greedy(c)], null).result)[0]!);
    agreedSteps(c, out, tolerance, label);
    alone.push(out);
  }
  const batch = (await model.generate(checkpoint.cases.map(greedy), null).result).map((o) => Array.from(o));
  checkpoint.cases.forEach((c, i) => agreedSteps(c, batch[i]!, tolerance, `${label} (batch)`));
  return alone;
}

describe("llama and 16-bit checkpoints", function () {
  let reference: Record<string, ReferenceCheckpoint>;

  before(function () {
    this.timeout(600000); // the set includes quantized exports (Q4_K is slow to quantize); made once per process
    reference = nativeFixtureSet();
  });

  it("rotates by the checkpoint's own frequencies (rope_inv_freq), whatever config.json says of rope", async () => {
    const checkpoint = reference["llama3-scaled"]!;
    // config.json's rope settings do not enter the native forward: with them dropped or naming a
    // scaling the runtime does not know, the load-time check still finds the checkpoint's forward.
    for (const ropeScaling of [null, { rope_type: "yarn", factor: 4 }]) {
      const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
      try {
        const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
        const choice = await model.configure({
          contextLength: 64,
          runtime: "native",
          architecture: "llama",
          dtype: checkpoint.dtype,
          modelConfig: { ...config, rope_scaling: ropeScaling },
        });
        expect(choice.runtime).to.equal("native");
      } finally {
        await model.dispose();
      }
    }
  });

  it("refuses the native runtime for a llama layout without the rope_inv_freq buffer, naming it", async () => {
    // The llama-gqa checkpoint rebuilt with its frequencies as a plain attribute: the
    // TorchScript forward still runs, but nothing tells the native runtime how to rotate.
    const file = join(dirname(reference["llama-gqa"]!.file), "llama-no-rope-buffer.pt");
    const code = `
import dataclasses, json, sys, torch
sys.path.insert(0, ${JSON.stringify(join(repoRoot, "python"))})
from torchserve_node import llama
files = {"config.json": ""}
scripted = torch.jit.load(sys.argv[1], _extra_files=files)
config = json.loads(files["config.json"])
names = {f.name for f in dataclasses.fields(llama.LlamaConfig)} & set(config)
model = llama.LlamaLM(llama.LlamaConfig(**{k: config[k] for k in names}))
model.load_state_dict(scripted.state_dict())
model.rope_inv_freq = model._buffers.pop("rope_inv_freq")
torch.jit.save(torch.jit.script(model.eval()), sys.argv[2], _extra_files=files)
`;
    const made = spawnSync("/usr/bin/python3", ["-c", code, reference["llama-gqa"]!.file, file], { encoding: "utf8" });
    expect(made.status, made.stderr).to.equal(0);
    const settings = { contextLength: 64, architecture: "llama", dtype: "float32" as const };
    const model = await addon.loadLanguageModel(file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
      const native = await rejection(model.configure({ ...settings, runtime: "native", modelConfig: config }));
      expect(native.code).to.equal("ERR_CHECKPOINT_INTERFACE");
      expect(native.message).to.include("rope_inv_freq");
      const auto = await model.configure({ ...settings, runtime: "auto", modelConfig: config });
      expect(auto.runtime).to.equal("torchscript");
      expect(auto.note).to.include("rope_inv_freq");
    } finally {
      await model.dispose();
    }
  });

  for (const name of variants) {
    for (const { runtime, kernels } of arms) {
      const label = `${name}, ${runtime}${kernels ? ` ${kernels}` : ""}`;
      it(`${label}: greedy agrees with the reference; batch == alone; stream == batch`, async () => {
        const checkpoint = reference[name]!;
        const model: RawLanguageModel = await addon.loadLanguageModel(checkpoint.file, {
          device: runtime === "torchscript" ? device : "cpu",
          extraFiles: ["config.json"],
          threads: 2,
        });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          const choice = await model.configure({
            contextLength: 64,
            eosTokenIds: [],
            runtime,
            kernels: kernels ?? "auto",
            architecture: checkpoint.architecture,
            dtype: checkpoint.dtype,
            modelConfig: config,
            // As TorchEngine configures it: the native runtime then owns the weights, and the
            // SIMD families interleave Q4_K rows in groups of eight (their products' own layout).
            releaseModuleWeights: runtime === "native",
          });
          expect(choice.runtime, choice.note).to.equal(runtime);
          if (kernels) expect(choice.kernels).to.equal(kernels);
          // Q4_K rows on avx2 and Intel's AVX-512 families (regroupsQ4K), Q8_0 rows on avx2 and avx512 (llama-gqa-q4_k_m has no
          // Q4_K: its widths give it Q5_0 and Q8_0), Q4_0 and Q5_0 rows on every SIMD family, Q8_0
          // tile panels on amx and avx512_bf16; a tied head is not grouped.
          const groups: RegExp[] = [];
          if (runtime === "native" && choice.kernels !== "baseline") {
            const avx2 = choice.kernels === "avx2";
            if (name === "llama-wide-q4_k_m" && regroupsQ4K(choice.kernels)) groups.push(/Q4_K rows interleaved in \d+ groups/);
            if (name === "llama-wide-q4_0" || name === "llama-gqa-q4_k_m") groups.push(/Q4_0\/Q5_0 rows interleaved in \d+ groups/);
            if ((name.endsWith("q8_0") || name === "llama-gqa-q4_k_m") && (avx2 || choice.kernels === "avx512")) {
              groups.push(/Q8_0 rows interleaved in \d+ groups/);
            }
            if ((name.endsWith("q8_0") || name === "llama-gqa-q4_k_m") && (choice.kernels === "amx" || choice.kernels === "avx512_bf16")) {
              groups.push(/Q8_0 rows laid out in \d+ tile panels of sixteen for the (amx|avx512_bf16) kernels/);
            }
          }
          for (const group of groups.length > 0 ? groups : [/^(?!.*interleaved)/]) expect(choice.note ?? "", label).to.match(group);
          // A bf16 checkpoint's matrices are packed, or read where they lie (SERVICE_BF16_WEIGHTS).
          if (runtime === "native" && checkpoint.dtype === "bfloat16") {
            const inPlace = /\d+ bf16 matrices read where they lie, not packed/;
            if (readsBf16InPlace()) expect(choice.note ?? "", label).to.match(inPlace);
            else expect(choice.note ?? "", label).to.not.match(inPlace);
          }

          const sixteen = checkpoint.dtype !== "float32";
          // The TorchScript runtime computes a 16-bit checkpoint in float32 on a CPU without
          // fast 16-bit matmuls (and float16 always: libtorch's CPU has no float16 matmul); on a
          // GPU in its own dtype.
          const widened =
            runtime === "torchscript" && sixteen && device === "cpu" && (checkpoint.dtype === "float16" || !fastBf16);
          if (runtime === "torchscript" && sixteen) expect(choice.note ?? "").to.include(widened ? "in float32" : "");
          // Quantized weights: the reference is the checkpoint's dequantizing forward, which the
          // TorchScript runtime runs; the native runtime quantizes activations per block of 32.
          const quantized = checkpoint.quantization !== undefined;
          const tolerance =
            quantized ? (runtime === "native" ? 2e-2 : 1e-3) : !sixteen || widened ? 1e-3 : runtime === "native" ? 2e-2 : 5e-2;
          const alone: number[][] = [];
          let compared = 0;
          let total = 0;
          for (const c of checkpoint.cases) {
            const [out] = await model.generate([greedy(c)], null).result;
            alone.push(Array.from(out!));
            compared += agreedSteps(c, alone.at(-1)!, tolerance, label);
            total += c.output_ids.length;
          }
          expect(compared, `${label}: steps compared`).to.be.at.least(total / 2);

          // The same prompts again start from the prefix the first run left in the cache (all
          // but the last prompt token): the native runtime gives exactly its uncached tokens
          // (a reused prefix is a chunk boundary, and its rows compute alike in any count), the
          // TorchScript runtime agrees with the reference as before.
          for (const [i, c] of checkpoint.cases.entries()) {
            const generation = model.generate([greedy(c)], null);
            const again = Array.from((await generation.result)[0]!);
            expect(generation.cachedTokens(), label).to.deep.equal([c.prompt_ids.length > 8 ? c.prompt_ids.length - 1 : 0]);
            if (runtime === "native") expect(again, `${label} (prefix cache)`).to.deep.equal(alone[i]);
            else agreedSteps(c, again, tolerance, `${label} (prefix cache)`);
          }

          const streamed: number[][] = checkpoint.cases.map(() => []);
          const batch = await model.generate(checkpoint.cases.map(greedy), (pairs) => {
            for (let i = 0; i < pairs.length; i += 2) streamed[pairs[i]!]!.push(pairs[i + 1]!);
          }).result;
          const rows = batch.map((o) => Array.from(o));
          expect(streamed).to.deep.equal(rows);
          if (runtime === "native") {
            expect(rows).to.deep.equal(alone);
          } else {
            // The TorchScript runtime pads a batch, so its sums may round differently: held to the
            // same agreement with the reference as alone.
            checkpoint.cases.forEach((c, i) => agreedSteps(c, rows[i]!, tolerance, `${label} (batch)`));
          }
        } finally {
          await model.dispose();
        }
      });
    }
  }

  // The quantized products take up to four rows a call for the 32-value types (eight on the
  // AVX-512 families) and sixteen for the K-quants (a super-block unpacked once for all of them):
  // a batch wider than both, and prompts longer, must still give every row what it gets alone.
  for (const name of ["llama-gqa-q8_0", "llama-wide-q4_k_m", "llama-gqa-q4_k_m", "llama-wide-q4_0", "llama-wide-q5_k_m"]) {
    for (const kernels of addon.kernelFamilies) {
      it(`${name}, native ${kernels}: 19 rows decoding together each get their tokens alone`, async () => {
        const checkpoint = reference[name]!;
        const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 2 });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          await model.configure({
            contextLength: 64,
            eosTokenIds: [],
            prefixCache: false, // each run prefills its prompts whole
            runtime: "native",
            kernels,
            architecture: checkpoint.architecture,
            dtype: checkpoint.dtype,
            modelConfig: config,
            releaseModuleWeights: true, // the SIMD families' interleaved Q4_K rows, as TorchEngine serves them
          });
          // Prompts of 3 to 21 tokens cut from the cases' prompts, 6 new tokens each.
          const pool = checkpoint.cases.flatMap((c) => c.prompt_ids);
          const long = pool.concat(pool, pool, pool);
          const rows = Array.from({ length: 19 }, (_, i) => ({
            tokens: Int32Array.from(long.slice(i, 2 * i + 3)),
            maxNewTokens: 6,
            sampling: { temperature: 0, topK: 0, seed: -1 },
          }));
          const alone: number[][] = [];
          for (const row of rows) alone.push(Array.from((await model.generate([row], null).result)[0]!));
          const together = (await model.generate(rows, null).result).map((o) => Array.from(o));
          expect(together).to.deep.equal(alone);
        } finally {
          await model.dispose();
        }
      });
    }
  }

  // On a GPU the TorchScript runtime dequantizes once by default (docs/benchmarks.md section 8);
  // "once" asks for the same on the CPU, so the path runs in every suite: the tied Q8_0 head
  // (QuantEmbedding) and the Q4_K/Q6_K modules.
  for (const name of ["qwen-bias-tied-q8_0", "llama-wide-q4_k_m"]) {
    it(`SERVICE_TORCHSCRIPT_DEQUANTIZE: ${name} dequantized once at load agrees with the reference as dequantizing every call does`, async () => {
      const checkpoint = reference[name]!;
      const settings = { contextLength: 64, eosTokenIds: [], runtime: "torchscript" as const, architecture: checkpoint.architecture, dtype: checkpoint.dtype };
      const outputs: Record<string, number[][]> = {};
      const moduleBytes: Record<string, number> = {};
      for (const mode of ["every-call", "once", "auto"] as const) {
        const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 2 });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          const choice = await model.configure({ ...settings, modelConfig: config, torchscriptDequantize: mode });
          // "auto" on the CPU: every call (the native runtime serves there; memory is what quantizing saves).
          if (mode === "once") expect(choice.note).to.match(/dequantized \d+ quantized matrices once at load/);
          else expect(choice.note ?? "").to.not.include("dequantized");
          moduleBytes[mode] = (await model.weightBytes()).module;
          outputs[mode] = await greedyAloneAndBatched(model, checkpoint, 1e-3, `${name}, ${mode}`);
          if (mode === "once") {
            const bad = await rejection(model.configure({ ...settings, modelConfig: config, torchscriptDequantize: "never" as never }));
            expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
            expect(bad.message).to.include("torchscriptDequantize");
          }
        } finally {
          await model.dispose();
        }
      }
      // The float32 copies are counted with the module's weights (4 bytes a weight, against
      // about 1 for Q8_0 and 0.6 for Q4_K_M); on the CPU the quantized rows stay beside them.
      expect(moduleBytes["once"]).to.be.greaterThan(3 * moduleBytes["every-call"]!);
      expect(moduleBytes["auto"]).to.equal(moduleBytes["every-call"]);
      // The same weights in the same float32 products: the tokens match where the reference's
      // margins are clear, which agreedSteps held each run to; most prompts match whole.
      const same = outputs["once"]!.filter((o, i) => o.join() === outputs["every-call"]![i]!.join()).length;
      expect(same).to.be.at.least(Math.ceil(checkpoint.cases.length / 2));
    });
  }

  // The optimiser's default is on for a float checkpoint and off for a quantized one; each is
  // asked the other way here, on a fresh load each (a module's graph executor is not switched
  // between plans), and held to the reference's greedy tokens, alone and batched.
  for (const name of ["llama-gqa", "llama-gqa-q8_0"]) {
    it(`SERVICE_TORCHSCRIPT_OPTIMIZE: ${name} agrees with the reference with torch's graph optimiser on and off`, async () => {
      const checkpoint = reference[name]!;
      const settings = { contextLength: 64, eosTokenIds: [], runtime: "torchscript" as const, architecture: checkpoint.architecture, dtype: checkpoint.dtype };
      for (const mode of ["on", "off", "auto"] as const) {
        const model = await addon.loadLanguageModel(checkpoint.file, { device, extraFiles: ["config.json"], threads: 2 });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          const choice = await model.configure({ ...settings, modelConfig: config, torchscriptOptimize: mode });
          if (mode === "auto") expect(choice.note ?? "").to.not.include("graph optimiser");
          else expect(choice.note).to.include(`torch's graph optimiser ${mode} (SERVICE_TORCHSCRIPT_OPTIMIZE)`);
          await greedyAloneAndBatched(model, checkpoint, 1e-3, `${name}, optimiser ${mode}`);
          if (mode === "auto") {
            const bad = await rejection(model.configure({ ...settings, modelConfig: config, torchscriptOptimize: "yes" as never }));
            expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
            expect(bad.message).to.include("torchscriptOptimize");
          }
        } finally {
          await model.dispose();
        }
      }
    });
  }

  it("SERVICE_TORCHSCRIPT_COMPUTE: the TorchScript runtime computes bf16 in float32 where the CPU has no fast bf16 matmuls, or as asked", async () => {
    const checkpoint = reference["llama-gqa-bf16"]!;
    const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
      const settings = { contextLength: 64, runtime: "torchscript" as const, architecture: "llama", dtype: checkpoint.dtype, modelConfig: config };
      const own = await model.configure({ ...settings, torchscriptCompute: "checkpoint" });
      const wide = await model.configure({ ...settings, torchscriptCompute: "float32" });
      const auto = await model.configure({ ...settings, torchscriptCompute: "auto" });
      // The cache follows the compute dtype: float32 rows are twice the bf16 ones.
      expect(wide.kvBytesPerRow).to.equal(2 * own.kvBytesPerRow);
      expect(wide.note).to.include("in float32");
      expect(own.note ?? "").to.not.include("in float32");
      expect(auto.kvBytesPerRow).to.equal(fastBf16 ? own.kvBytesPerRow : wide.kvBytesPerRow);
      const bad = await rejection(model.configure({ ...settings, torchscriptCompute: "int8" as never }));
      expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
      expect(bad.message).to.include("torchscriptCompute");
    } finally {
      await model.dispose();
    }
  });
});
