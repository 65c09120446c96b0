/**
 * Automatic prefix caching on both runtimes (tiny-gpt fixture): a prompt that starts with
 * tokens a finished or running row computed starts from those positions, and its tokens are
 * the ones computed without the cache: the golden outputs (every golden margin is far above
 * float differences, so tokens compare exactly), or a model configured with prefixCache off.
 * The llama and 16-bit checkpoints' near-tie agreement with the cache is in llama.test.ts.
 */
import { expect } from "chai";

import { loadAddon } from "../../src/native/binding.js";
import type { RawGenerateRow, RawLanguageModel } from "../../src/native/types.js";
import { fixture, goldenFor, type GoldenCase } from "../helpers/fixtures.js";

const addon = loadAddon();
const golden = goldenFor("tiny-gpt.pt");

const greedy = (tokens: number[], maxNewTokens: number): RawGenerateRow => ({
  tokens: Int32Array.from(tokens),
  maxNewTokens,
  sampling: { temperature: 0, topK: 0, seed: -1 },
});
const goldenRow = (c: GoldenCase): RawGenerateRow => greedy(c.prompt_ids, c.max_new_tokens);
const seeded = (tokens: number[], maxNewTokens: number, seed: number): RawGenerateRow => ({
  tokens: Int32Array.from(tokens),
  maxNewTokens,
  sampling: { temperature: 1, topK: 0, seed },
});
/** A byte prompt of `length` tokens, different for each `salt`. */
const text = (length: number, salt: number): number[] => Array.from({ length }, (_, i) => 97 + ((i * (salt + 3) + salt) % 26));

async function run(model: RawLanguageModel, rows: RawGenerateRow[]): Promise<{ tokens: number[][]; cached: number[] }> {
  const generation = model.generate(rows, null);
  const out = await generation.result;
  return { tokens: out.map((o) => Array.from(o)), cached: generation.cachedTokens() };
}

for (const runtime of ["native", "torchscript"] as const) {
  describe(`prefix cache (${runtime} runtime)`, function () {
    let cached: RawLanguageModel;
    let plain: RawLanguageModel;
    beforeEach(async () => {
      cached = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      plain = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      const settings = { contextLength: 64, eosTokenIds: [], runtime, architecture: "gpt", kvBudgetMb: 1, stepTokens: 16 };
      await cached.configure(settings);
      await plain.configure({ ...settings, prefixCache: false });
    });
    afterEach(async () => {
      await cached.dispose();
      await plain.dispose();
    });

    it("a repeated prompt reuses all but its last token and still gives the golden tokens", async () => {
      for (const c of golden.cases) {
        const first = await run(cached, [goldenRow(c)]);
        const again = await run(cached, [goldenRow(c)]);
        expect(first.tokens[0], c.name).to.deep.equal(c.output_ids);
        expect(again.tokens[0], `${c.name}, from the cache`).to.deep.equal(c.output_ids);
        const window = c.prompt_ids_used.length;
        // A row that slid its window (reprefills) no longer holds the prompt at position 0.
        const expected = window - 1 >= 8 && c.reprefills === 0 ? window - 1 : 0;
        expect(again.cached[0], c.name).to.equal(expected);
      }
      const stats = cached.prefixCacheStats();
      expect(stats.hitTokens).to.be.greaterThan(0);
      expect(stats.queriedTokens).to.be.greaterThan(stats.hitTokens);
    });

    it("a growing chat reuses each earlier turn and matches a model without the cache, greedy and seeded", async () => {
      for (const sample of [false, true]) {
        let history = text(12, 1);
        for (let turn = 0; turn < 3; turn++) {
          const row = sample ? seeded(history, 6, 40 + turn) : greedy(history, 6);
          const withCache = await run(cached, [row]);
          const without = await run(plain, [row]);
          expect(withCache.tokens, `turn ${turn}`).to.deep.equal(without.tokens);
          expect(without.cached).to.deep.equal([0]);
          if (turn > 0) expect(withCache.cached[0], `turn ${turn}`).to.be.at.least(history.length - 12);
          history = [...history, ...withCache.tokens[0]!, ...text(5, turn + 7)];
        }
      }
    });

    it("concurrent jobs sharing a prefix copy it from the row computing it, with the same tokens", async () => {
      const shared = text(40, 2);
      const rows = [0, 1, 2, 3].map((i) => greedy([...shared, ...text(3 + i, 10 + i)], 5));
      const alone = await Promise.all(rows.map((row) => run(plain, [row])));
      const together = await Promise.all(rows.map((row) => run(cached, [row])));
      expect(together.map((r) => r.tokens)).to.deep.equal(alone.map((r) => r.tokens));
      // The first job computes the shared prefix; the others copy it once it is there.
      expect(together[0]!.cached[0]).to.equal(0);
      for (const later of together.slice(1)) expect(later.cached[0]).to.equal(shared.length);
    });

    it("n samples of a cached prompt share its prefix and the prefill, seeded as without the cache", async () => {
      const prompt = text(30, 4);
      await run(cached, [greedy(prompt, 3)]);
      const rows = [0, 1, 2].map((i): RawGenerateRow => ({ ...seeded(prompt, 8, 7 + i), ...(i > 0 ? { sharesPrefillWith: 0 } : {}) }));
      const withCache = await run(cached, rows);
      const without = await run(plain, rows);
      expect(withCache.tokens).to.deep.equal(without.tokens);
      expect(withCache.cached).to.deep.equal([29, 29, 29]);
    });

    it("past the context the window slides and later prompts still match the uncached tokens", async () => {
      // 40 new tokens after a 30-token prompt cross position 64: the row re-prefills its
      // most recent half; its slot then holds that window, not the prompt.
      const prompt = text(30, 5);
      const rows = [greedy(prompt, 5), greedy(prompt, 40), greedy([...prompt, ...text(10, 6)], 12)];
      const hits: number[] = [];
      for (const row of rows) {
        const withCache = await run(cached, [row]);
        expect(withCache.tokens).to.deep.equal((await run(plain, [row])).tokens);
        hits.push(withCache.cached[0]!);
      }
      // The second reuses the first's slot and prefix, then slides its window there: that slot
      // no longer starts with the prompt, so the third finds nothing to reuse.
      expect(hits).to.deep.equal([0, 29, 0]);
    });

    it("evicts the least recently used prefix when every slot holds one, and never refuses for it", async () => {
      // More prompts than the native runtime's most slots (64); the TorchScript runtime keeps
      // its busy slots low, so it evicts sooner.
      const prompts = Array.from({ length: 70 }, (_, i) => [i, ...text(19, 20 + i)]);
      for (const prompt of prompts) await run(cached, [greedy(prompt, 2)]);
      expect(cached.prefixCacheStats().evictions).to.be.greaterThan(0);
      // The most recent prompt is still cached; the first was evicted.
      expect((await run(cached, [greedy(prompts.at(-1)!, 2)])).cached[0]).to.equal(19);
      expect((await run(cached, [greedy(prompts[0]!, 2)])).cached[0]).to.equal(0);
      // A job wider than the free uncached slots still runs at once.
      const wide = await run(cached, prompts.slice(0, 8).map((p) => greedy(p, 2)));
      expect(wide.tokens).to.have.length(8);
    });

    it("a cancelled source hands its computed part to the rows waiting for it", async () => {
      const shared = text(48, 8);
      const first = cached.generate([greedy([...shared, 1], 30)], null);
      const second = cached.generate([greedy([...shared, 2], 4)], null);
      first.cancel();
      await first.result;
      const out = await second.result;
      expect([Array.from(out[0]!)]).to.deep.equal((await run(plain, [greedy([...shared, 2], 4)])).tokens);
    });

    it("with prefixCache off nothing is reused and a non-boolean setting is refused", async () => {
      const prompt = text(30, 9);
      await run(plain, [greedy(prompt, 2)]);
      expect((await run(plain, [greedy(prompt, 2)])).cached).to.deep.equal([0]);
      expect(plain.prefixCacheStats()).to.deep.equal({ queriedTokens: 0, hitTokens: 0, evictions: 0 });
      const other = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      try {
        let error: (Error & { code?: string }) | undefined;
        await other.configure({ contextLength: 64, prefixCache: "no" as unknown as boolean }).catch((e: Error) => (error = e));
        expect(error?.code).to.equal("ERR_INVALID_ARGUMENT");
        expect(error?.message).to.include("prefixCache");
      } finally {
        await other.dispose();
      }
    });
  });
}
