/**
 * Concurrent streams on the engine (no HTTP), side by side in one run, on both runtimes:
 * the native CPU runtime and the TorchScript runtime (the device-generic path that runs on
 * CUDA), both batching continuously. Two scenarios, runtimes alternating round by round:
 *
 * 1. Burst: N streams started at once (greedy, fixed length): time until the last ends and
 *    the median time to first token.
 * 2. Gap under arriving long prompts: R streams decode; their inter-token gaps are measured
 *    first alone ("idle"), then while F feeders keep sending 2,000-character prompts one after
 *    another ("loaded"). Reported: the idle mean gap (pieces often reach JavaScript several
 *    at a time, so an idle p50 gap can be near 0), the idle and loaded p99 gaps, and loaded
 *    p99 over idle mean (target: at most 3x) and over idle p99 (which leaves out the
 *    machine's own scheduling noise), chunked (the default policy) and unchunked
 *    (stepTokens 0) for contrast.
 *
 *   node dist/scripts/bench/concurrent-streams.js [--ckpt models/brown-gpt.pt] [--streams 16]
 *        [--tokens 128] [--rounds 3] [--running 4] [--feeders 2] [--threads N] [--quick]
 */
import { availableParallelism, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { median, percentile } from "./lib/stats.js";
import { PROMPTS } from "./lib/prompts.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(root, "models", "brown-gpt.pt") },
    streams: { type: "string", default: "16" },
    tokens: { type: "string", default: "128" },
    rounds: { type: "string", default: "3" },
    running: { type: "string", default: "4" },
    feeders: { type: "string", default: "2" },
    threads: { type: "string", default: String(Math.min(8, Math.max(1, availableParallelism() - 1))) },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/concurrent-streams.js [options]
  --ckpt PATH     GPT checkpoint (default models/brown-gpt.pt)
  --streams N     burst: streams started at once (default 16)
  --tokens N      burst: new tokens per stream, at most (default 128; a stream ends early at eos)
  --running N     gap scenario: decoding streams whose gaps are measured (default 4)
  --feeders N     gap scenario: clients sending 2,000-character prompts back to back (default 2)
  --rounds N      rounds, runtimes alternating (default 3; --quick 1)
  --threads N     compute threads (default cores - 1, at most 8: the server's default)`);
  process.exit(0);
}
const streams = Number(args.streams);
const tokens = Number(args.tokens);
const rounds = args.quick ? 1 : Number(args.rounds);
const running = Number(args.running);
const feeders = Number(args.feeders);
const threads = Number(args.threads);
const greedy = { temperature: 1e-6, topK: null };
const LONG_PROMPT = PROMPTS.join(" ").repeat(20).slice(0, 2000);

interface Burst {
  totalMs: number;
  firstTokenMs: number[];
}

async function burst(engine: TorchEngine): Promise<Burst> {
  const start = performance.now();
  const firstTokenMs: number[] = [];
  await Promise.all(
    Array.from({ length: streams }, async (_, i) => {
      let first = true;
      for await (const _piece of engine.generateStream({ prompt: PROMPTS[i % PROMPTS.length]!, maxNewTokens: tokens, ...greedy })) {
        if (first) firstTokenMs.push(performance.now() - start);
        first = false;
      }
    }),
  );
  return { totalMs: performance.now() - start, firstTokenMs };
}

// Gaps between the pieces of `running` streams of `length` tokens; while they run, `feeders`
// clients send long prompts back to back when `withLongPrompts`.
async function gaps(engine: TorchEngine, withLongPrompts: boolean): Promise<{ gaps: number[]; longPrompts: number }> {
  const all: number[] = [];
  let done = false;
  let longPrompts = 0;
  const feeding = withLongPrompts
    ? Array.from({ length: feeders }, async () => {
        while (!done) {
          for await (const _piece of engine.generateStream({ prompt: LONG_PROMPT, maxNewTokens: 2, ...greedy }));
          longPrompts += 1;
        }
      })
    : [];
  await Promise.all(
    Array.from({ length: running }, async (_, i) => {
      let last = Number.NaN;
      let n = 0;
      for await (const _piece of engine.generateStream({ prompt: PROMPTS[i % PROMPTS.length]!, maxNewTokens: 200, ...greedy })) {
        const now = performance.now();
        // The first 8 pieces are left out: they overlap the other streams' prefill.
        if (++n > 8) all.push(now - last);
        last = now;
      }
    }),
  );
  done = true;
  await Promise.all(feeding);
  return { gaps: all, longPrompts };
}

type Arm = "native" | "torchscript" | "native, unchunked" | "torchscript, unchunked";
const arms: Array<{ name: Arm; runtime: "native" | "torchscript"; stepTokens?: number }> = [
  { name: "native", runtime: "native" },
  { name: "torchscript", runtime: "torchscript" },
  { name: "native, unchunked", runtime: "native", stepTokens: 0 },
  { name: "torchscript, unchunked", runtime: "torchscript", stepTokens: 0 },
];
const engines = new Map<Arm, TorchEngine>();
for (const arm of arms) {
  const engine = await TorchEngine.load(args.ckpt!, { device: "cpu", threads, runtime: arm.runtime, stepTokens: arm.stepTokens });
  if (engine.runtime !== arm.runtime) throw new Error(`asked for ${arm.runtime}, got ${engine.runtime}`);
  engines.set(arm.name, engine);
}

const bursts = new Map<Arm, Burst[]>();
const gapRounds = new Map<Arm, Array<{ idleMean: number; idleP99: number; loadedP99: number; loadedP50: number; longPrompts: number }>>();
const loadBefore = loadavg()[0]!;
for (let r = 0; r < rounds; r++) {
  const order = r % 2 === 0 ? arms : [...arms].reverse();
  for (const arm of order) {
    const engine = engines.get(arm.name)!;
    if (!arm.name.includes("unchunked")) bursts.set(arm.name, [...(bursts.get(arm.name) ?? []), await burst(engine)]);
    const idle = await gaps(engine, false);
    const loaded = await gaps(engine, true);
    gapRounds.set(arm.name, [
      ...(gapRounds.get(arm.name) ?? []),
      {
        idleMean: idle.gaps.reduce((a, b) => a + b, 0) / idle.gaps.length,
        idleP99: percentile(idle.gaps, 99),
        loadedP50: percentile(loaded.gaps, 50),
        loadedP99: percentile(loaded.gaps, 99),
        longPrompts: loaded.longPrompts,
      },
    ]);
  }
  process.stderr.write(`round ${r + 1}/${rounds} done\n`);
}
const loadAfter = loadavg()[0]!;
for (const engine of engines.values()) await engine.dispose();

console.log(`${threads} compute thread(s), ${rounds} round(s), load ${loadBefore.toFixed(1)} -> ${loadAfter.toFixed(1)}\n`);
console.log(`burst: ${streams} streams started at once, ${tokens} tokens each (median of rounds)\n`);
console.log("| runtime | all streams done, ms | median time to first token, ms |");
console.log("|---|---:|---:|");
for (const [name, rows] of bursts) {
  console.log(`| ${name} | ${median(rows.map((x) => x.totalMs)).toFixed(0)} | ${median(rows.map((x) => median(x.firstTokenMs))).toFixed(1)} |`);
}
console.log(`\ngap: ${running} streams decoding; loaded = ${feeders} clients sending 2,000-character prompts back to back (median of rounds)\n`);
console.log("| runtime | idle gap mean, ms | idle gap p99, ms | loaded gap p50, ms | loaded gap p99, ms | p99 loaded / mean idle | p99 loaded / p99 idle | long prompts served |");
console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
for (const [name, rows] of gapRounds) {
  const med = (f: (x: (typeof rows)[number]) => number) => median(rows.map(f));
  console.log(
    `| ${name} | ${med((x) => x.idleMean).toFixed(2)} | ${med((x) => x.idleP99).toFixed(2)} | ${med((x) => x.loadedP50).toFixed(2)} | ` +
      `${med((x) => x.loadedP99).toFixed(2)} | ${med((x) => x.loadedP99 / x.idleMean).toFixed(1)}x | ` +
      `${med((x) => x.loadedP99 / x.idleP99).toFixed(1)}x | ${med((x) => x.longPrompts)} |`,
  );
}
