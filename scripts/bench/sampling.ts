/**
 * What the sampling controls cost, side by side in one run on the native runtime (ratios,
 * this machine is shared):
 *   - decode at batch 8: plain temperature sampling (the baseline) against the same rows with
 *     top_p + min_p, with presence/frequency/repetition penalties, and with log-probabilities
 *     (5 alternatives), each row's tokens streamed back as the HTTP layer reads them;
 *   - n samples of one long prompt: n rows sharing one prefill (cache rows copied) against n
 *     independent rows with the same prompt, time to the first token of all n.
 *
 *   node dist/scripts/bench/sampling.js [--ckpt models/brown-gpt.pt] [--threads N] [--rounds 3] [--quick]
 *
 * Rounds alternate the arms. Results go to .cache/bench/sampling-latest.json.
 */
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";

import { loadAddon } from "../../src/native/binding.js";
import type { RawGenerateRow, RawLanguageModel, RawSamplingSettings } from "../../src/native/types.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { fmt, median, table } from "./lib/stats.js";

const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(repoRoot, "models", "brown-gpt.pt") },
    threads: { type: "string", default: String(Math.max(1, availableParallelism() - 1)) },
    rounds: { type: "string", default: "3" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log("usage: node dist/scripts/bench/sampling.js [--ckpt PATH] [--threads N] [--rounds N] [--quick]");
  process.exit(0);
}
const rounds = args.quick ? 1 : Number(args.rounds);
const newTokens = args.quick ? 32 : 96;
const BATCH = 8;
const N = 8;
const LONG_PROMPT = 400;

const plain: RawSamplingSettings = { temperature: 0.8, topK: 0, seed: 1 };
const decodeArms: Record<string, RawSamplingSettings> = {
  "temperature (baseline)": plain,
  "+ top_p 0.9, min_p 0.05": { ...plain, topP: 0.9, minP: 0.05 },
  "+ penalties (0.5, 0.5, 1.2)": { ...plain, presencePenalty: 0.5, frequencyPenalty: 0.5, repetitionPenalty: 1.2 },
  "+ logprobs (5 alternatives)": { ...plain, logprobs: 5 },
};

async function timed(model: RawLanguageModel, rows: RawGenerateRow[], onFirst?: () => void): Promise<number> {
  const started = performance.now();
  let tokens = 0;
  await model.generate(rows, (pairs) => {
    tokens += pairs.length / 2;
    if (onFirst && tokens >= rows.length) onFirst();
  }).result;
  return performance.now() - started;
}

async function main(): Promise<void> {
  const model = await loadAddon().loadLanguageModel(args.ckpt!, { device: "cpu", threads: Number(args.threads), extraFiles: ["config.json"] });
  const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown> & { block_size: number };
  await model.configure({ contextLength: config.block_size, eosTokenIds: [], runtime: "native", architecture: "gpt", modelConfig: config, prefixCache: false });
  const prompt = Int32Array.from(Buffer.from("The jury said that the city of Atlanta "));
  const long = Int32Array.from({ length: LONG_PROMPT }, (_unused, i) => prompt[i % prompt.length]!);

  const decode: Record<string, number[]> = Object.fromEntries(Object.keys(decodeArms).map((name) => [name, []]));
  const prefill = { shared: [] as number[], separate: [] as number[] };
  for (let round = 0; round < rounds; round++) {
    for (const [name, sampling] of Object.entries(decodeArms)) {
      const rows = Array.from({ length: BATCH }, (_unused, i) => ({ tokens: prompt, maxNewTokens: newTokens, sampling: { ...sampling, seed: i } }));
      const ms = await timed(model, rows);
      decode[name]!.push((ms / newTokens) * 1000);
    }
    for (const arm of ["shared", "separate"] as const) {
      const rows: RawGenerateRow[] = Array.from({ length: N }, (_unused, i) => ({
        tokens: long,
        maxNewTokens: 1,
        sampling: { ...plain, seed: i },
        ...(arm === "shared" && i > 0 ? { sharesPrefillWith: 0 } : {}),
      }));
      prefill[arm].push(await timed(model, rows));
    }
  }
  await model.dispose();

  const base = median(decode["temperature (baseline)"]!);
  console.log(`\ndecode, batch ${BATCH}, ${newTokens} tokens, median of ${rounds} (us per step; ratio to the baseline)`);
  console.log(table(["arm", "us/step", "x baseline"], Object.entries(decode).map(([name, v]) => [name, fmt(median(v), 0), fmt(median(v) / base, 2)])));
  const shared = median(prefill.shared);
  const separate = median(prefill.separate);
  console.log(`\n${N} samples of a ${LONG_PROMPT}-token prompt, first token of all (ms)`);
  console.log(table(["arm", "ms", "x separate"], [["one shared prefill", fmt(shared, 1), fmt(shared / separate, 2)], ["separate prefills", fmt(separate, 1), "1.00"]]));
  const file = writeResults("sampling", { ckpt: args.ckpt, threads: Number(args.threads), rounds, newTokens, decodeUsPerStep: decode, prefillMs: prefill });
  console.log(`\nwrote ${file}`);
}

await main();
