/**
 * The "llama" architecture on tiny random-weight checkpoints (test/model/python/make_hf_fixture.py
 * --native-set: Hugging Face directories exported by export_hf.py, with grouped-query attention,
 * q/k/v biases with a tied head, Llama 3.1 rope scaling, bf16 and fp16 weights) and the "gpt"
 * fixture rounded to bf16 and fp16, on the native runtime under every kernel family this CPU
 * runs and on the TorchScript runtime: greedy continuations agree with the Python reference
 * (hf_reference.py's uncached float32 forward; the GPT's own forward for the GPT),
 * a batch gives each row what it gets alone, and streamed tokens are the batch's.
 *
 * Agreement: outputs equal the reference token for token, except that they may part at a step
 * where the reference's best two logits are within 2 * tolerance * (largest |logit|) of each
 * other (a near-tie that a difference within the tolerance may flip); after that the sequences
 * are no longer comparable. Tolerances: float32 1e-3 (the load-time check's); 16-bit on the
 * native runtime 2e-2 (activations rounded to bf16 before the bf16 dot products; see
 * native/Runtime.cc); 16-bit on the TorchScript runtime 5e-2 (it rounds every activation to
 * 16 bits). At least half of all steps must be compared, so a broken runtime cannot pass by
 * parting early everywhere.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamily, RawGenerateRow, RawLanguageModel } from "../../src/native/types.js";
import { repoRoot } from "../helpers/fixtures.js";
import { rejection } from "../helpers/rejection.js";

interface ReferenceCase {
  prompt_ids: number[];
  output_ids: number[];
  margins: number[];
  scales: number[];
}
interface ReferenceCheckpoint {
  file: string;
  dtype: "float32" | "bfloat16" | "float16";
  architecture: string;
  cases: ReferenceCase[];
}

const greedy = (c: ReferenceCase): RawGenerateRow => ({
  tokens: Int32Array.from(c.prompt_ids),
  maxNewTokens: c.output_ids.length,
  sampling: { temperature: 0, topK: 0, seed: -1 },
});

/** Steps compared before the output parts from the reference; throws when it parts at a decisive step. */
function agreedSteps(c: ReferenceCase, output: number[], tolerance: number, label: string): number {
  expect(output.length, label).to.equal(c.output_ids.length);
  for (let i = 0; i < output.length; i++) {
    if (output[i] === c.output_ids[i]) continue;
    const allowed = 2 * tolerance * c.scales[i]!;
    expect(c.margins[i], `${label}: step ${i} chose ${output[i]}, the reference ${c.output_ids[i]} by a margin of ${c.margins[i]}`)
      .to.be.at.most(allowed);
    return i;
  }
  return output.length;
}

const addon = loadAddon();
const variants = ["llama-gqa", "qwen-bias-tied", "llama3-scaled", "llama-gqa-bf16", "llama-gqa-fp16", "gpt-bf16", "gpt-fp16"];
const arms: Array<{ runtime: "native" | "torchscript"; kernels?: KernelFamily }> = [
  ...addon.kernelFamilies.map((kernels) => ({ runtime: "native" as const, kernels })),
  { runtime: "torchscript" },
];

describe("llama and 16-bit checkpoints", function () {
  let dir: string;
  let reference: Record<string, ReferenceCheckpoint>;

  before(function () {
    this.timeout(120000);
    dir = mkdtempSync(join(tmpdir(), "tsn-llama-"));
    const made = spawnSync(
      "/usr/bin/python3",
      [join(repoRoot, "test", "model", "python", "make_hf_fixture.py"), dir, "--native-set"],
      { encoding: "utf8" },
    );
    expect(made.status, made.stderr).to.equal(0);
    reference = JSON.parse(readFileSync(join(dir, "reference.json"), "utf8")) as typeof reference;
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("refuses the native runtime when config.json does not describe the weights' forward", async () => {
    const checkpoint = reference["llama3-scaled"]!;
    const model = await addon.loadLanguageModel(checkpoint.file, { device: "cpu", extraFiles: ["config.json"], threads: 1 });
    try {
      const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
      const settings = { contextLength: 64, runtime: "native" as const, architecture: "llama", dtype: checkpoint.dtype };
      // Without its rope scaling, the native forward is not the checkpoint's: the load-time check says so.
      const unscaled = await rejection(model.configure({ ...settings, modelConfig: { ...config, rope_scaling: null } }));
      expect(unscaled.code).to.equal("ERR_CHECKPOINT_INTERFACE");
      expect(unscaled.message).to.include("disagrees");
      const yarn = await rejection(
        model.configure({ ...settings, modelConfig: { ...config, rope_scaling: { rope_type: "yarn", factor: 4 } } }),
      );
      expect(yarn.code).to.equal("ERR_CHECKPOINT_INTERFACE");
      expect(yarn.message).to.include("rope_scaling type \"yarn\"");
    } finally {
      await model.dispose();
    }
  });

  for (const name of variants) {
    for (const { runtime, kernels } of arms) {
      // libtorch's CPU kernels have no float16 matrix product: llama.py computes a float16
      // checkpoint in float32 on the CPU, gpt.py does not, so the fp16 GPT runs on the CPU
      // through the native runtime only.
      if (runtime === "torchscript" && name === "gpt-fp16") continue;
      const label = `${name}, ${runtime}${kernels ? ` ${kernels}` : ""}`;
      it(`${label}: greedy agrees with the reference; batch == alone; stream == batch`, async () => {
        const checkpoint = reference[name]!;
        const model: RawLanguageModel = await addon.loadLanguageModel(checkpoint.file, {
          device: "cpu",
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
          });
          expect(choice.runtime, choice.note).to.equal(runtime);
          if (kernels) expect(choice.kernels).to.equal(kernels);

          const sixteen = checkpoint.dtype !== "float32";
          const tolerance = !sixteen ? 1e-3 : runtime === "native" ? 2e-2 : 5e-2;
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
});
