/**
 * What constrained decoding costs (structured output), side by side in one run: the same
 * requests with and without a constraint through TorchEngine (grammar masks computed on the
 * JS thread after each token, applied by the addon's sampler), at 8 concurrent requests and
 * at batch 1. Tokens/s counts the tokens generated over the wall time of all requests of an
 * arm; the constrained arms' ratio to the unconstrained ones is the figure (target >= 0.8x).
 *
 *   node dist/scripts/bench/constrained.js [--ckpt models/brown-gpt.pt] [--threads N] [--rounds 3] [--tokens 128] [--quick]
 *
 * Arms: json_object (any JSON object: a model that knows no JSON ends it when it closes the
 * object), and a JSON Schema with a long string (the constraint holds for every token). The
 * grammars are compiled before timing (compilation is cached per schema). Rounds alternate
 * the arms. Results go to .cache/bench/constrained-latest.json.
 */
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import type { CompletionRequest, GenerationConstraint } from "../../src/types.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { fmt, median, table } from "./lib/stats.js";

const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(repoRoot, "models", "brown-gpt.pt") },
    threads: { type: "string", default: String(Math.max(1, availableParallelism() - 1)) },
    rounds: { type: "string", default: "3" },
    tokens: { type: "string", default: "128" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log("usage: node dist/scripts/bench/constrained.js [--ckpt PATH] [--threads N] [--rounds N] [--tokens N] [--quick]");
  process.exit(0);
}
const rounds = args.quick ? 1 : Number(args.rounds);
const maxNewTokens = args.quick ? 48 : Number(args.tokens);

const CONSTRAINTS: Record<string, GenerationConstraint> = {
  json_object: { type: "json_object" },
  "json_schema (long string)": {
    type: "json_schema",
    schema: { type: "object", properties: { story: { type: "string", minLength: 4 * maxNewTokens } }, required: ["story"], additionalProperties: false },
  },
};

/** Tokens generated and seconds taken by `concurrency` requests at once. */
async function run(engine: TorchEngine, concurrency: number, constraint: GenerationConstraint | undefined, round: number) {
  const requests: CompletionRequest[] = Array.from({ length: concurrency }, (_unused, i) => ({
    prompt: `Record ${i}: `,
    maxNewTokens,
    temperature: 0.8,
    topK: null,
    seed: 1000 * round + i,
    ...(constraint ? { constraint } : {}),
  }));
  const started = performance.now();
  // Concurrent requests join one continuous batch, as the HTTP layer's streams do.
  const done = await Promise.all(requests.map((request) => engine.complete([request])));
  const seconds = (performance.now() - started) / 1000;
  const tokens = done.reduce((sum, [completion]) => sum + completion!.choices[0]!.completionTokens, 0);
  return { tokens, seconds };
}

async function main(): Promise<void> {
  const engine = await TorchEngine.load(args.ckpt!, { threads: Number(args.threads) });
  try {
    for (const constraint of Object.values(CONSTRAINTS)) await engine.prepareConstraint(constraint);
    await run(engine, 8, CONSTRAINTS.json_object, 99); // warm-up: matchers, first masks, caches
    const arms: { name: string; concurrency: number; constraint?: GenerationConstraint }[] = [];
    for (const concurrency of [8, 1]) {
      arms.push({ name: "unconstrained (baseline)", concurrency });
      for (const [name, constraint] of Object.entries(CONSTRAINTS)) arms.push({ name, concurrency, constraint });
    }
    const rates = new Map<string, number[]>();
    const perRequest = new Map<string, number[]>();
    for (let round = 0; round < rounds; round++) {
      for (const arm of arms) {
        const { tokens, seconds } = await run(engine, arm.concurrency, arm.constraint, round);
        const key = `${arm.concurrency}|${arm.name}`;
        rates.set(key, [...(rates.get(key) ?? []), tokens / seconds]);
        perRequest.set(key, [...(perRequest.get(key) ?? []), tokens / arm.concurrency]);
      }
    }
    const rows: string[][] = [];
    const results: Record<string, unknown>[] = [];
    for (const arm of arms) {
      const key = `${arm.concurrency}|${arm.name}`;
      const rate = median(rates.get(key)!);
      const baseline = median(rates.get(`${arm.concurrency}|unconstrained (baseline)`)!);
      const tokens = median(perRequest.get(key)!);
      rows.push([String(arm.concurrency), arm.name, fmt(tokens, 0), fmt(rate, 0), `${fmt(rate / baseline, 2)}x`]);
      results.push({ concurrency: arm.concurrency, arm: arm.name, tokensPerRequest: tokens, tokensPerSecond: rate, ratio: rate / baseline });
    }
    console.log(`constrained decoding, ${args.ckpt} (${engine.runtime}), ${maxNewTokens} max tokens, ${rounds} round(s), medians`);
    console.log(table(["requests", "arm", "tokens/request", "tokens/s", "vs unconstrained"], rows));
    console.log(`results: ${writeResults("constrained", { maxNewTokens, rounds, threads: Number(args.threads), runtime: engine.runtime, results })}`);
  } finally {
    await engine.dispose();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
