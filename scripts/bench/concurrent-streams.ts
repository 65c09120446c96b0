/**
 * Concurrent streams on the engine, side by side in one run: N streams started at once
 * (`TorchEngine.generateStream`, greedy, fixed length), on the native runtime (continuous
 * batching: each job joins the running decode loop) and on the TorchScript runtime (jobs run
 * one after the other). Reports the time until the last stream ends and the median time to
 * first token, as medians of alternating rounds, and their ratios.
 *
 *   node dist/scripts/bench/concurrent-streams.js [--ckpt models/brown-gpt.pt] [--streams 16]
 *        [--tokens 128] [--rounds 3] [--threads N (default cores - 1, the server's default)]
 */
import { availableParallelism, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { median } from "./lib/stats.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(root, "models", "brown-gpt.pt") },
    streams: { type: "string", default: "16" },
    tokens: { type: "string", default: "128" },
    rounds: { type: "string", default: "3" },
    threads: { type: "string", default: String(Math.min(8, Math.max(1, availableParallelism() - 1))) },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/concurrent-streams.js [options]
  --ckpt PATH     GPT checkpoint (default models/brown-gpt.pt)
  --streams N     streams started at once (default 16)
  --tokens N      new tokens per stream, at most (default 128; a stream ends early at eos)
  --rounds N      rounds, runtimes alternating (default 3)
  --threads N     compute threads (default cores - 1, at most 8: the server's default)`);
  process.exit(0);
}
const streams = Number(args.streams);
const tokens = Number(args.tokens);
const rounds = Number(args.rounds);
const threads = Number(args.threads);

const PROMPTS = ["The jury said", "In the morning", "Once upon a time", "He walked to the", "It was not", "The city of"];

interface Round {
  totalMs: number;
  firstTokenMs: number[];
  pieces: number;
}

async function round(engine: TorchEngine): Promise<Round> {
  const start = performance.now();
  const firstTokenMs: number[] = [];
  let pieces = 0;
  await Promise.all(
    Array.from({ length: streams }, async (_, i) => {
      let first = true;
      const request = { prompt: PROMPTS[i % PROMPTS.length]!, maxNewTokens: tokens, temperature: 1e-6, topK: null };
      for await (const piece of engine.generateStream(request)) {
        if (first) firstTokenMs.push(performance.now() - start);
        first = false;
        pieces += piece.length > 0 ? 1 : 0;
      }
    }),
  );
  return { totalMs: performance.now() - start, firstTokenMs, pieces };
}

const runtimes = ["native", "torchscript"] as const;
const engines = new Map<(typeof runtimes)[number], TorchEngine>();
for (const runtime of runtimes) {
  const engine = await TorchEngine.load(args.ckpt!, { device: "cpu", threads, runtime });
  if (engine.runtime !== runtime) throw new Error(`asked for ${runtime}, got ${engine.runtime}`);
  engines.set(runtime, engine);
  await round(engine); // warm-up
}

const results = { native: [] as Round[], torchscript: [] as Round[] };
const loadBefore = loadavg()[0]!;
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? runtimes : ([...runtimes].reverse() as (typeof runtimes)[number][]);
  for (const runtime of order) results[runtime].push(await round(engines.get(runtime)!));
  process.stderr.write(`round ${r + 1}/${rounds} done\n`);
}
const loadAfter = loadavg()[0]!;
for (const engine of engines.values()) await engine.dispose();

const total = (runtime: (typeof runtimes)[number]) => median(results[runtime].map((x) => x.totalMs));
const ttft = (runtime: (typeof runtimes)[number]) => median(results[runtime].map((x) => median(x.firstTokenMs)));
console.log(
  `${streams} concurrent streams x ${tokens} tokens, ${threads} compute thread(s), ${rounds} rounds, load ${loadBefore.toFixed(1)} -> ${loadAfter.toFixed(1)}`,
);
console.log("");
console.log("| runtime | all streams done, ms | median time to first token, ms |");
console.log("|---|---:|---:|");
for (const runtime of runtimes) console.log(`| ${runtime} | ${total(runtime).toFixed(0)} | ${ttft(runtime).toFixed(1)} |`);
console.log("");
console.log(
  `native vs torchscript: all done ${(total("torchscript") / total("native")).toFixed(1)}x sooner, ` +
    `first token ${(ttft("torchscript") / ttft("native")).toFixed(0)}x sooner`,
);
