/**
 * Automatic prefix caching, side by side in one run: two engines on the same checkpoint in
 * one process, one with the prefix cache (the default) and one with it off
 * (SERVICE_PREFIX_CACHE=off), driven alternately so load on the machine hits both alike.
 *
 *   (a) chat: a conversation of --turns turns, each adding a user message of a few hundred
 *       tokens (and the previous answer): time to first token of every turn.
 *   (b) shared system prompt: --concurrency requests at once, each a ~900-token system prompt
 *       plus its own question; TTFT p50 (a cold wave, where the first request computes the
 *       prompt while the others wait to copy it, and a warm wave, where it is cached).
 *   (c) nothing to share: --concurrency requests with distinct prompts; generated tokens/s.
 *
 * Model: .cache/bench/models/llama-chat-2k-f32.pt (scripts/bench/make_bench_models.py, built on
 * first use): a small Llama shape with Llama 2's real tokenizer and a 2,048-token context.
 *
 *   nice -n 10 node dist/scripts/bench/prefix-cache.js [--ckpt PATH] [--runtime native|torchscript]
 *        [--rounds 3] [--turns 5] [--concurrency 16] [--threads 1] [--quick] [--only abc]
 *
 * TTFT is the time a request with max_new_tokens 1 takes (prefill and one token), measured in
 * the engine (no HTTP). Results go to .cache/bench/prefix-cache-*.json.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import type { CompletionRequest } from "../../src/types.js";
import { machineFacts } from "./lib/machine.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { median, percentile } from "./lib/stats.js";

const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string" },
    runtime: { type: "string", default: "native" },
    rounds: { type: "string", default: "3" },
    turns: { type: "string", default: "5" },
    concurrency: { type: "string", default: "16" },
    threads: { type: "string", default: "1" },
    quick: { type: "boolean", default: false },
    only: { type: "string", default: "abc" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/prefix-cache.js [options]
  --ckpt PATH          checkpoint (default .cache/bench/models/llama-chat-2k-f32.pt, built on first use)
  --runtime NAME       native (default) or torchscript
  --rounds N           conversations / waves per arm (default 3)
  --turns N            turns per conversation (default 5, at least 4)
  --concurrency N      requests at once in (b) and (c) (default 16; 8-64)
  --threads N          compute threads of each engine (default 1)
  --quick              1 round, 4 turns, 8 requests at once
  --only LETTERS       the scenarios to run, e.g. c (default abc)`);
  process.exit(0);
}
const rounds = args.quick ? 1 : Number(args.rounds);
const turns = args.quick ? 4 : Math.max(4, Number(args.turns));
const concurrency = args.quick ? 8 : Number(args.concurrency);
const threads = Number(args.threads);
const runtime = args.runtime === "torchscript" ? "torchscript" : "native";

/** The benchmark's model, made once (random weights, real tokenizer). */
function benchModel(): string {
  const path = join(repoRoot, ".cache", "bench", "models", "llama-chat-2k-f32.pt");
  if (existsSync(path)) return path;
  const tokenizer = join(repoRoot, ".cache", "bench", "models", "llama2-tokenizer.json");
  execFileSync(process.execPath, [join(repoRoot, "test", "helpers", "real_tokenizers.mjs"), "llama", tokenizer], { stdio: "inherit" });
  execFileSync("/usr/bin/python3", [join(repoRoot, "scripts", "bench", "make_bench_models.py"), "--models", "llama-chat-2k", "--llama-tokenizer", tokenizer], {
    stdio: "inherit",
  });
  return path;
}

/** Deterministic English-like text: `words` words from a small vocabulary, different per seed. */
const VOCABULARY = (
  "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they " +
  "you were her she there been one all we their has would when if so no will what can more other time people year " +
  "state city water market report court county council school church music river garden letter morning history"
).split(" ");
function words(count: number, seed: number): string {
  let x = (seed * 2654435761) >>> 0 || 1;
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.push(VOCABULARY[x % VOCABULARY.length]!);
  }
  return out.join(" ");
}

const request = (prompt: string, maxNewTokens: number): CompletionRequest => ({ prompt, maxNewTokens, temperature: 0, topK: null });

interface Arm {
  name: "cache" | "no cache";
  engine: TorchEngine;
}

/** Seconds one request with max_new_tokens 1 takes, and the tokens it reused. */
async function ttft(engine: TorchEngine, prompt: string): Promise<{ seconds: number; cached: number; prompt: number }> {
  const start = performance.now();
  const [done] = await engine.complete([request(prompt, 1)]);
  return { seconds: (performance.now() - start) / 1000, cached: done!.cachedPromptTokens ?? 0, prompt: done!.promptTokens };
}

async function chat(arms: Arm[]) {
  // perTurn[arm][turn] = seconds over rounds
  const perTurn: Record<string, number[][]> = Object.fromEntries(arms.map((a) => [a.name, Array.from({ length: turns }, () => [])]));
  const promptTokens: number[][] = Array.from({ length: turns }, () => []);
  const cachedTokens: number[][] = Array.from({ length: turns }, () => []);
  for (let round = 0; round < rounds; round++) {
    let history = `System: you are a helpful assistant for conversation ${round}. ${words(60, 1000 + round)}\n`;
    for (let turn = 0; turn < turns; turn++) {
      history += `User: ${words(260, round * 100 + turn)}\nAssistant:`;
      const order = (round + turn) % 2 === 0 ? arms : [...arms].reverse();
      for (const arm of order) {
        const t = await ttft(arm.engine, history);
        perTurn[arm.name]![turn]!.push(t.seconds);
        if (arm.name === "cache") {
          promptTokens[turn]!.push(t.prompt);
          cachedTokens[turn]!.push(t.cached);
        }
      }
      // The answer (both engines give the same greedy text; each computes it, as a server would).
      let answer = "";
      for (const arm of order) {
        const [done] = await arm.engine.complete([request(history, 24)]);
        if (arm.name === "cache") answer = done!.choices[0]!.text;
      }
      history += `${answer}\n`;
    }
  }
  const rows = Array.from({ length: turns }, (_, turn) => {
    const withCache = median(perTurn["cache"]![turn]!);
    const without = median(perTurn["no cache"]![turn]!);
    return { turn: turn + 1, promptTokens: median(promptTokens[turn]!), cachedTokens: median(cachedTokens[turn]!), withCache, without, ratio: withCache / without };
  });
  return rows;
}

async function sharedSystemPrompt(arms: Arm[]) {
  const waves: Record<string, Record<"cold" | "warm", number[]>> = Object.fromEntries(arms.map((a) => [a.name, { cold: [], warm: [] }]));
  const cached: Record<"cold" | "warm", number[]> = { cold: [], warm: [] };
  let systemTokens = 0;
  for (let round = 0; round < rounds; round++) {
    const system = `System: you are the support assistant of shop ${round}. Policies follow. ${words(880, 5000 + round)}\n`;
    systemTokens = arms[0]!.engine.encodePrompt(system).length;
    const order = round % 2 === 0 ? arms : [...arms].reverse();
    for (const arm of order) {
      for (const wave of ["cold", "warm"] as const) {
        const prompts = Array.from({ length: concurrency }, (_, i) => `${system}User ${i}: ${words(24, 9000 + i + (wave === "warm" ? 500 : 0))}\nAssistant:`);
        const results = await Promise.all(prompts.map((p) => ttft(arm.engine, p)));
        waves[arm.name]![wave].push(...results.map((r) => r.seconds));
        if (arm.name === "cache") cached[wave].push(...results.map((r) => r.cached));
      }
    }
  }
  return (["cold", "warm"] as const).map((wave) => {
    const withCache = percentile(waves["cache"]![wave], 50);
    const without = percentile(waves["no cache"]![wave], 50);
    return { wave, systemTokens, cachedTokensP50: percentile(cached[wave], 50), withCache, without, ratio: withCache / without };
  });
}

async function nothingShared(arms: Arm[]) {
  const rates: Record<string, number[]> = Object.fromEntries(arms.map((a) => [a.name, []]));
  const newTokens = 32;
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? arms : [...arms].reverse();
    for (const arm of order) {
      // Distinct from their first words on, and not seen before by either engine.
      const prompts = Array.from({ length: concurrency }, (_, i) => `${words(3, 70000 + round * 1000 + i + (arm.name === "cache" ? 0 : 500))} ${words(200, 80000 + round * 1000 + i)}`);
      const start = performance.now();
      const done = await Promise.all(prompts.map((p) => arm.engine.complete([request(p, newTokens)])));
      const seconds = (performance.now() - start) / 1000;
      const tokens = done.reduce((sum, [c]) => sum + c!.choices[0]!.completionTokens, 0);
      rates[arm.name]!.push(tokens / seconds);
    }
  }
  // Each round's ratio pairs the two arms' back-to-back runs; the median of those is the figure.
  const ratios = rates["cache"]!.map((r, i) => r / rates["no cache"]![i]!);
  return { withCache: median(rates["cache"]!), without: median(rates["no cache"]!), ratio: median(ratios), ratios };
}

const fmt = (s: number) => `${(s * 1000).toFixed(0)} ms`;

async function main() {
  const ckpt = args.ckpt ?? benchModel();
  const facts = machineFacts();
  const options = { threads, runtime, kvBudgetMb: Math.max(512, concurrency * 32) } as const;
  const cacheEngine = await TorchEngine.load(ckpt, { ...options, prefixCache: true });
  const plainEngine = await TorchEngine.load(ckpt, { ...options, prefixCache: false });
  const arms: Arm[] = [
    { name: "cache", engine: cacheEngine },
    { name: "no cache", engine: plainEngine },
  ];
  try {
    console.log(`prefix cache: ${ckpt} (${cacheEngine.runtime}${cacheEngine.kernels ? ` ${cacheEngine.kernels}` : ""}, ${threads} thread(s)), ${rounds} rounds, ${facts.cpu}`);
    // Both engines serve a few unrelated prompts first: whichever arm went first would
    // otherwise pay for the process's first requests (code paths, allocator, KV pages).
    for (let i = 0; i < 2; i++) {
      for (const arm of arms) await arm.engine.complete([request(`Warm-up ${i}: ${words(300, 424242 + i)}`, 2)]);
    }
    const chatRows = args.only.includes("a") ? await chat(arms) : [];
    if (chatRows.length) {
      console.log(`\n(a) chat, time to first token per turn (median of ${rounds} conversations)`);
      console.log("turn  prompt tok  cached tok   with cache   without   ratio");
      for (const r of chatRows) {
        console.log(`${String(r.turn).padStart(4)}  ${String(r.promptTokens).padStart(10)}  ${String(r.cachedTokens).padStart(10)}  ${fmt(r.withCache).padStart(11)}  ${fmt(r.without).padStart(8)}  ${r.ratio.toFixed(2).padStart(6)}x`);
      }
    }
    const shared = args.only.includes("b") ? await sharedSystemPrompt(arms) : [];
    if (shared.length) {
      console.log(`\n(b) ${concurrency} concurrent requests sharing a system prompt, TTFT p50`);
      console.log("wave  system tok  cached p50   with cache   without   ratio");
      for (const r of shared) {
        console.log(`${r.wave.padEnd(4)}  ${String(r.systemTokens).padStart(10)}  ${String(r.cachedTokensP50).padStart(10)}  ${fmt(r.withCache).padStart(11)}  ${fmt(r.without).padStart(8)}  ${r.ratio.toFixed(2).padStart(6)}x`);
      }
    }
    const plain = args.only.includes("c") ? await nothingShared(arms) : undefined;
    if (plain) {
      console.log(`\n(c) ${concurrency} concurrent requests with nothing to share, generated tokens/s (median of ${rounds} rounds)`);
      console.log(`with cache ${plain.withCache.toFixed(1)}  without ${plain.without.toFixed(1)}  ratio ${plain.ratio.toFixed(3)}x (rounds ${plain.ratios.map((r) => r.toFixed(2)).join(", ")})`);
    }
    const turn4 = chatRows[3]?.ratio;
    const sharedP50 = shared.length ? Math.max(...shared.map((r) => r.ratio)) : undefined;
    console.log(
      `\ntargets: turn 4 TTFT ${turn4?.toFixed(2) ?? "-"}x (<= 0.3x), shared prompt p50 ${shared.map((r) => `${r.wave} ${r.ratio.toFixed(2)}x`).join(" / ") || "-"} (<= 0.5x), nothing shared ${plain?.ratio.toFixed(3) ?? "-"}x (>= 0.97x)`,
    );
    const file = writeResults("prefix-cache", {
      machine: facts,
      settings: { ckpt, runtime: cacheEngine.runtime, kernels: cacheEngine.kernels, threads, rounds, turns, concurrency },
      chat: chatRows,
      sharedSystemPrompt: shared,
      nothingShared: plain,
      targets: { turn4, sharedP50, nothingShared: plain?.ratio },
      usage: cacheEngine.usage(),
    });
    console.log(`results: ${file}`);
  } finally {
    await cacheEngine.dispose();
    await plainEngine.dispose();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
