/**
 * The addon's sampling controls against the Python reference's goldens
 * (test/model/python/make_sampling_golden.py), on both runtimes: penalised greedy tokens exactly
 * (every golden margin is far above float differences between CPUs), raw log-probabilities
 * within the golden's tolerance, and top-k/top-p/min-p never sampling outside the set the
 * reference keeps.
 */
import { expect } from "chai";
import { readFileSync } from "node:fs";

import { loadAddon } from "../../src/native/binding.js";
import type { RawGenerateRow, RawLanguageModel, RawSamplingSettings } from "../../src/native/types.js";
import { fixture, goldenFor } from "../helpers/fixtures.js";

interface SamplingGolden {
  float_tolerance: number;
  penalised: { name: string; prompt: string; settings: Record<string, number>; max_new_tokens: number; output_ids: number[] }[];
  logprobs: { prompt: string; top: number; output_ids: number[]; entries: { token: number; logprob: number; top: [number, number][] }[] }[];
  filters: { prompt: string; filter: string; settings: Record<string, number>; kept_ids: number[] }[];
}

const golden = JSON.parse(readFileSync(fixture("tiny-gpt.sampling.golden.json"), "utf8")) as SamplingGolden;
const WIRE: Record<string, keyof RawSamplingSettings> = {
  temperature: "temperature",
  top_k: "topK",
  top_p: "topP",
  min_p: "minP",
  presence_penalty: "presencePenalty",
  frequency_penalty: "frequencyPenalty",
  repetition_penalty: "repetitionPenalty",
};

function sampling(settings: Record<string, number>, extra: Partial<RawSamplingSettings> = {}): RawSamplingSettings {
  const raw: RawSamplingSettings = { temperature: 0, topK: 0, seed: -1 };
  for (const [name, value] of Object.entries(settings)) (raw as unknown as Record<string, number>)[WIRE[name]!] = value;
  return { ...raw, ...extra };
}

const bytes = (text: string) => Int32Array.from(Buffer.from(text, "utf8"));

for (const runtime of ["native", "torchscript"] as const) {
  describe(`sampling controls against the reference (${runtime} runtime)`, () => {
    let model: RawLanguageModel;
    before(async () => {
      model = await loadAddon().loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      const eos = goldenFor("tiny-gpt.pt").config.tokenizer.eos_token_id;
      const chosen = await model.configure({ contextLength: 64, eosTokenIds: eos === null ? [] : [eos], runtime, architecture: "gpt" });
      expect(chosen.runtime).to.equal(runtime);
    });
    after(() => model.dispose());

    it("penalised greedy rows, all in one batch, give the reference's tokens", async () => {
      const rows: RawGenerateRow[] = golden.penalised.map((c) => ({
        tokens: bytes(c.prompt),
        maxNewTokens: c.max_new_tokens,
        sampling: sampling(c.settings),
      }));
      const outs = await model.generate(rows, null).result;
      golden.penalised.forEach((c, i) => expect(Array.from(outs[i]!), c.name).to.deep.equal(c.output_ids));
    });

    it("log-probabilities and their top alternatives are the reference's", async () => {
      for (const c of golden.logprobs) {
        const seen: { token: number; logprob: number; top: [number, number][] }[] = [];
        await model.generate(
          [{ tokens: bytes(c.prompt), maxNewTokens: c.output_ids.length, sampling: sampling({}, { logprobs: c.top }) }],
          (pairs, logprobs, topIds, topLogprobs) => {
            for (let i = 0; i < pairs.length / 2; i++) {
              const top: [number, number][] = [];
              for (let j = 0; j < c.top; j++) top.push([topIds![i * c.top + j]!, topLogprobs![i * c.top + j]!]);
              seen.push({ token: pairs[2 * i + 1]!, logprob: logprobs![i]!, top });
            }
          },
        ).result;
        expect(seen.map((e) => e.token)).to.deep.equal(c.output_ids);
        c.entries.forEach((want, step) => {
          const got = seen[step]!;
          expect(got.logprob).to.be.closeTo(want.logprob, golden.float_tolerance);
          expect(got.top.map(([id]) => id)).to.deep.equal(want.top.map(([id]) => id));
          got.top.forEach(([, lp], j) => expect(lp).to.be.closeTo(want.top[j]![1], golden.float_tolerance));
        });
      }
    });

    it("top-k, top-p and min-p sample only tokens the reference keeps (32 seeds, one shared prefill)", async () => {
      for (const c of golden.filters) {
        const rows: RawGenerateRow[] = Array.from({ length: 32 }, (_unused, seed) => ({
          tokens: bytes(c.prompt),
          maxNewTokens: 1,
          sampling: sampling(c.settings, { seed }),
          ...(seed > 0 ? { sharesPrefillWith: 0 } : {}),
        }));
        const outs = await model.generate(rows, null).result;
        for (const out of outs) expect(c.kept_ids, `${c.filter} on ${JSON.stringify(c.prompt)}`).to.include(out[0]);
      }
    });
  });
}
