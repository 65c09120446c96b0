/**
 * Streams under load, over HTTP, side by side in one run: N clients in a closed loop, each
 * streaming (`POST /generate/stream`) a prompt of 20-300 characters for a fixed number of
 * new tokens, against
 *   - FastAPI + PyTorch (scripts/bench/fastapi_server.py: the same loop as reference.py,
 *     streams batched by the same rule as /generate: max 8 requests or 5 ms),
 *   - our server on its native runtime ("auto"), and on its TorchScript runtime (the
 *     device-generic path, SERVICE_RUNTIME=torchscript),
 *   - optionally the same two from another checkout (--before DIR: a copy of an older build
 *     with dist/ and build/Release/torchserve.node), for "not below today's".
 * Reports time to first token (p50, p95) and inter-token gaps (p50, p99) of the streams that
 * started in each window, and tokens per second; ratios against FastAPI per round, median
 * of rounds. Arms alternate round by round.
 *
 *   node dist/scripts/bench/stream-ttft.js [--ckpt models/brown-gpt.pt] [--clients 64]
 *        [--tokens 32] [--rounds 2] [--seconds 8] [--warmup 3] [--threads N] [--before DIR]
 *        [--arms fastapi,native,torchscript] [--quick]
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

import { Child } from "./lib/child.js";
import { LoadSampler, machineFacts } from "./lib/machine.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { startFastapi, startOurServer } from "./lib/servers.js";
import { streamLoop, type StreamLoopResult } from "./lib/streamClient.js";
import { fmt, median, percentile } from "./lib/stats.js";
import { PROMPTS } from "./lib/prompts.js";

const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(repoRoot, "models", "brown-gpt.pt") },
    clients: { type: "string", default: "64" },
    tokens: { type: "string", default: "32" },
    rounds: { type: "string", default: "2" },
    seconds: { type: "string", default: "8" },
    warmup: { type: "string", default: "3" },
    threads: { type: "string", default: "1" },
    before: { type: "string" },
    arms: { type: "string", default: "fastapi,native,torchscript" },
    "step-tokens": { type: "string" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/stream-ttft.js [options]
  --ckpt PATH        GPT checkpoint (default models/brown-gpt.pt)
  --clients N        concurrent streams, closed loop (default 64)
  --tokens N         new tokens per stream (default 32)
  --rounds N         rounds, arms alternating (default 2; --quick 1)
  --seconds S        measured window per arm (default 8; --quick 4)
  --warmup S         warm-up before each window (default 3)
  --threads N        compute threads of every server (default 1: one core for the server's
                     compute, one for the event loop and the load client on a 2-core machine)
  --before DIR       also run our two arms from DIR (an older build: dist/, build/Release)
  --arms LIST        which of fastapi,native,torchscript (default all three)
  --step-tokens N    SERVICE_STEP_TOKENS of our arms (default: the server's)`);
  process.exit(0);
}
const clients = Number(args.clients);
const tokens = Number(args.tokens);
const rounds = args.quick ? 1 : Number(args.rounds);
const durationMs = Number(args.quick ? "4" : args.seconds) * 1000;
const warmupMs = Number(args.warmup) * 1000;
const threads = Number(args.threads);
const checkpoint = resolve(args.ckpt!);

// Prompts of 20 to 300 characters, cut from the benchmark's English prompt set.
const corpus = PROMPTS.join(" ").repeat(2);
const PROMPT_SET = Array.from({ length: 15 }, (_, i) => {
  const length = 20 + i * 20;
  return corpus.slice(i * 37, i * 37 + length).trim();
});

interface Arm {
  name: string;
  url: string;
  stop(): Promise<void>;
}

async function startArms(): Promise<Arm[]> {
  const wanted = new Set(args.arms!.split(","));
  const arms: Arm[] = [];
  const ours = (root: string | undefined, runtime: "auto" | "torchscript", label: string) => async () => {
    const env: Record<string, string> = { SERVICE_RUNTIME: runtime, SERVICE_THREADS: String(threads) };
    if (args["step-tokens"] !== undefined) env.SERVICE_STEP_TOKENS = args["step-tokens"];
    if (root) return startBefore(root, env, label);
    const server = await startOurServer({ checkpoint, threads, env }, label);
    return { name: label, url: server.info.text, stop: () => server.stop() };
  };
  const starters: Array<() => Promise<Arm>> = [];
  if (wanted.has("fastapi")) {
    starters.push(async () => {
      const server = await startFastapi({ checkpoint, maxBatchSize: 8, maxWaitMs: 5, threads });
      return { name: "FastAPI + PyTorch", url: server.info.url, stop: () => server.stop() };
    });
  }
  if (wanted.has("native")) starters.push(ours(undefined, "auto", "ours, native"));
  if (wanted.has("torchscript")) starters.push(ours(undefined, "torchscript", "ours, torchscript"));
  if (args.before) {
    if (wanted.has("native")) starters.push(ours(args.before, "auto", "before, native"));
    if (wanted.has("torchscript")) starters.push(ours(args.before, "torchscript", "before, torchscript"));
  }
  // One at a time: loading and warming up competes for the same two cores.
  try {
    for (const start of starters) arms.push(await start());
  } catch (err) {
    await Promise.all(arms.map((arm) => arm.stop()));
    throw err;
  }
  return arms;
}

async function startBefore(root: string, env: Record<string, string>, name: string): Promise<Arm> {
  const urls: { text?: string; recsys?: string } = {};
  const child = await Child.start<{ url: string }>({
    name,
    command: process.execPath,
    args: [join(resolve(root), "dist", "src", "server.js")],
    env: { HOST: "127.0.0.1", PORT: "0", RECSYS_PORT: "0", SERVICE_CKPT: checkpoint, RECSYS_CKPT: join(repoRoot, "models", "recsys-demo.pt"), LOG_LEVEL: "info", OMP_WAIT_POLICY: "PASSIVE", ...env },
    ready(line) {
      if ((line.app === "text" || line.app === "recsys") && typeof line.url === "string") {
        urls[line.app] = line.url.replace("localhost", "127.0.0.1");
      }
      return urls.text && urls.recsys ? { url: urls.text } : undefined;
    },
  });
  return { name, url: child.info.url, stop: () => child.stop() };
}

const summary = (r: StreamLoopResult) => ({
  ttftP50: percentile(r.firstTokenMs, 50),
  ttftP95: percentile(r.firstTokenMs, 95),
  gapP50: percentile(r.gapsMs, 50),
  gapP99: percentile(r.gapsMs, 99),
  tokensPerSec: r.eventsPerSec,
  streams: r.streams,
  errors: r.errors,
});
type Summary = ReturnType<typeof summary>;

const load = new LoadSampler();
const arms = await startArms();
const results = new Map<string, Summary[]>();
try {
  console.log(`stream-ttft: ${clients} clients, prompts of 20-300 characters, ${tokens} new tokens (greedy), ` +
    `${rounds} round(s) of ${durationMs / 1000} s, threads ${threads}`);
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? arms : [...arms].reverse();
    for (const arm of order) {
      const outcome = summary(await streamLoop({
        baseUrl: arm.url, clients, prompts: PROMPT_SET, maxNewTokens: tokens, warmupMs, durationMs,
      }));
      results.set(arm.name, [...(results.get(arm.name) ?? []), outcome]);
      console.log(`  round ${round + 1} ${arm.name.padEnd(22)} TTFT p50 ${fmt(outcome.ttftP50, 0).padStart(6)} ms` +
        ` p95 ${fmt(outcome.ttftP95, 0).padStart(6)} ms  gap p50 ${fmt(outcome.gapP50, 1).padStart(6)} ms` +
        ` p99 ${fmt(outcome.gapP99, 1).padStart(6)} ms  ${fmt(outcome.tokensPerSec, 0).padStart(5)} tok/s` +
        `  ${outcome.streams} streams, ${outcome.errors} errors`);
    }
  }
} finally {
  await Promise.all(arms.map((arm) => arm.stop()));
}
const loadDuring = load.stop();

const base = results.get("FastAPI + PyTorch");
console.log("\narm (median of rounds)            TTFT p50   TTFT p95   gap p50   gap p99   tok/s   TTFT p50 / FastAPI   tok/s / FastAPI");
for (const [name, rows] of results) {
  const med = (f: (s: Summary) => number) => median(rows.map(f));
  const ratio = (f: (s: Summary) => number) =>
    base ? fmt(median(rows.map((r, i) => f(r) / f(base[i]!))), 2) + "x" : "-";
  console.log(`${name.padEnd(32)} ${fmt(med((s) => s.ttftP50), 0).padStart(7)} ms ${fmt(med((s) => s.ttftP95), 0).padStart(7)} ms` +
    ` ${fmt(med((s) => s.gapP50), 1).padStart(6)} ms ${fmt(med((s) => s.gapP99), 1).padStart(6)} ms ${fmt(med((s) => s.tokensPerSec), 0).padStart(6)}` +
    `   ${ratio((s) => s.ttftP50).padStart(18)}   ${ratio((s) => s.tokensPerSec).padStart(15)}`);
}
console.log(`\nload average (1 min) during the run: ${loadDuring.min.toFixed(2)}-${loadDuring.max.toFixed(2)}, mean ${loadDuring.mean}`);
const file = writeResults("stream-ttft", {
  benchmark: "stream-ttft",
  date: new Date().toISOString(),
  machine: machineFacts(),
  loadDuring,
  settings: { checkpoint, clients, tokens, rounds, durationMs, warmupMs, threads, before: args.before ?? null, prompts: PROMPT_SET },
  results: Object.fromEntries(results),
});
console.log(`results: ${file}`);
