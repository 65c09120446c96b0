/**
 * Constrained rows in the addon (structured output's engine seam), on both runtimes: a row
 * samples only what its mask allows (JavaScript sends one mask per token with setMask), a row
 * whose next mask is late sits out without holding up the other rows of the batch, and a held
 * row cancels cleanly. The grammar side is test/engine/constraints.test.ts.
 */
import { expect } from "chai";

import { loadAddon } from "../../src/native/binding.js";
import type { RawLanguageModel } from "../../src/native/types.js";
import { fixture, goldenFor } from "../helpers/fixtures.js";

const bytes = (text: string) => Int32Array.from(Buffer.from(text, "utf8"));

/** A bitmask allowing exactly `ids` (XGrammar's layout: bit id % 32 of word id / 32). */
function only(vocab: number, ids: readonly number[]): Int32Array {
  const mask = new Int32Array(Math.ceil(vocab / 32));
  for (const id of ids) mask[id >> 5]! |= 1 << (id & 31);
  return mask;
}

for (const runtime of ["native", "torchscript"] as const) {
  describe(`constrained rows (${runtime} runtime)`, function () {
    this.timeout(60000);
    let model: RawLanguageModel;
    let vocab: number;
    before(async () => {
      model = await loadAddon().loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      const golden = goldenFor("tiny-gpt.pt");
      vocab = golden.config.vocab_size;
      const eos = golden.config.tokenizer.eos_token_id;
      await model.configure({ contextLength: 64, eosTokenIds: eos === null ? [] : [eos], runtime, architecture: "gpt" });
    });
    after(() => model.dispose());

    it("samples only the allowed tokens, each step's mask in turn, sampled and greedy", async () => {
      const plan = [..."{ab}"].map((c) => c.charCodeAt(0));
      for (const temperature of [0, 1]) {
        let step = 0;
        const generation = model.generate(
          [{ tokens: bytes("The jury"), maxNewTokens: plan.length, sampling: { temperature, topK: 0, seed: 3 }, mask: only(vocab, [plan[0]!]) }],
          (pairs) => {
            for (let i = 0; i < pairs.length; i += 2) {
              step += 1;
              if (step < plan.length) generation.setMask(0, only(vocab, [plan[step]!]));
            }
          },
        );
        const [out] = await generation.result;
        expect(Array.from(out!)).to.deep.equal(plan);
      }
    });

    it("a row whose mask is late does not hold up the others; it goes on once the mask comes", async () => {
      const letters = only(vocab, [..."abc"].map((c) => c.charCodeAt(0)));
      const counts = [0, 0];
      let freeDoneWhileHeld = false;
      let release: (() => void) | undefined;
      const generation = model.generate(
        [
          { tokens: bytes("The jury"), maxNewTokens: 4, sampling: { temperature: 1, topK: 0, seed: 1 }, mask: letters },
          { tokens: bytes("It was"), maxNewTokens: 24, sampling: { temperature: 1, topK: 0, seed: 2 } },
        ],
        (pairs) => {
          for (let i = 0; i < pairs.length; i += 2) {
            const row = pairs[i]!;
            counts[row]! += 1;
            // The constrained row's second mask is withheld until the free row has finished.
            if (row === 0 && counts[0] === 1) release = () => generation.setMask(0, letters);
            else if (row === 0) generation.setMask(0, letters);
            if (row === 1 && counts[1] === 24) {
              freeDoneWhileHeld = counts[0] === 1;
              release?.();
            }
          }
        },
      );
      const [held, free] = await generation.result;
      expect(freeDoneWhileHeld).to.equal(true);
      expect(free).to.have.length(24);
      expect(held).to.have.length(4);
      for (const id of held!) expect("abc").to.include(String.fromCharCode(id));
    });

    it("a held row cancels; the call completes", async () => {
      const generation = model.generate(
        [{ tokens: bytes("The jury"), maxNewTokens: 10, sampling: { temperature: 1, topK: 0, seed: 1 }, mask: only(vocab, [97]) }],
        () => setImmediate(() => generation.cancel(0)), // never sends the next mask
      );
      const [out] = await generation.result;
      expect(Array.from(out!)).to.deep.equal([97]);
    });
  });
}
