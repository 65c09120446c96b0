/** Shared by the /generate benchmarks: calibration, throughput estimation, one measured arm. */
import { performance } from "node:perf_hooks";

import { closedLoop } from "./loadClient.js";
import { scrape, send, sleep } from "./http.js";
import { isGenerateAnswer, PROMPTS, wireRequest } from "./prompts.js";
import { percentile } from "./stats.js";

/** What each prompt of the set generates (greedy, so fixed): its text and its token count. */
export interface Calibration {
  texts: string[];
  tokens: number[];
}

/**
 * Sends each prompt once, alone, and reads the server's generated_tokens_total around it:
 * the token count of every prompt's continuation. Both our server and the FastAPI baseline
 * expose that counter, so both are calibrated the same way.
 */
export async function calibrate(baseUrl: string, maxNewTokens: number): Promise<Calibration> {
  const texts: string[] = [];
  const tokens: number[] = [];
  for (let i = 0; i < PROMPTS.length; i++) {
    const before = (await scrape(baseUrl)).get("generated_tokens_total") ?? Number.NaN;
    const reply = await send(`${baseUrl}/generate`, { method: "POST", body: JSON.stringify(wireRequest(i, maxNewTokens)), timeoutMs: 60_000 });
    if (reply.status !== 200) throw new Error(`calibration: ${baseUrl}/generate answered ${reply.status}: ${reply.body.slice(0, 300)}`);
    const after = (await scrape(baseUrl)).get("generated_tokens_total") ?? Number.NaN;
    texts.push((JSON.parse(reply.body) as { text: string }).text);
    tokens.push(after - before);
  }
  return { texts, tokens };
}

/**
 * Throughput from completion times, free of the window's quantisation: requests finish in
 * bursts (a batch at a time), so counting whole bursts in a fixed window is off by up to a
 * batch. Completions are grouped into bursts, a gap over 30% of the mean batch period
 * starting a new one (`perBurst`: completions per burst, i.e. the batch size, or 1 when
 * each entry is a whole batch); the rate is the tokens of bursts 2..K over the time from
 * burst 1 to burst K (each timed by its first completion): K-1 whole batch periods.
 * NaN with fewer than 3 bursts (the window is too short for the batch time).
 */
export function burstRate(completions: readonly { at: number; tokens: number }[], perBurst = 1): number {
  if (completions.length < 3) return Number.NaN;
  const sorted = [...completions].sort((a, b) => a.at - b.at);
  const span = sorted[sorted.length - 1]!.at - sorted[0]!.at;
  const period = span / Math.max(1, sorted.length / Math.max(1, perBurst) - 1);
  const gapMs = 0.3 * period;
  const bursts: { at: number; tokens: number }[] = [];
  let previous = Number.NEGATIVE_INFINITY;
  for (const c of sorted) {
    if (c.at - previous > gapMs) bursts.push({ at: c.at, tokens: 0 });
    bursts[bursts.length - 1]!.tokens += c.tokens;
    previous = c.at;
  }
  if (bursts.length < 3) return Number.NaN;
  const tokens = bursts.slice(1).reduce((sum, b) => sum + b.tokens, 0);
  return tokens / ((bursts[bursts.length - 1]!.at - bursts[0]!.at) / 1000);
}

export interface ArmRound {
  /** Tokens per second (burst-corrected, see burstRate). */
  tokensPerSec: number;
  /** Tokens completed in the window over the window: the plain estimate, for reference. */
  tokensPerSecWindow: number;
  requestsPerSec: number;
  p50Ms: number;
  p95Ms: number;
  completed: number;
  errors: number;
  errorSamples: string[];
  /** Mean engine batch size during the window (from the server's batch_size histogram). */
  meanBatch: number;
  /** Answers whose text differs from the calibrated one (greedy: should be 0 or near it). */
  textMismatches: number;
  /** Warm-up actually spent (at least until every client had an answer), ms. */
  warmupMs: number;
  /**
   * Tokens per CPU-second of the serving process over the whole arm (warm-up and the
   * cancelled tail included): what the work costs, whatever else the machine is doing.
   */
  tokensPerCpuSec?: number;
}

export interface HttpArmOptions {
  baseUrl: string;
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  maxNewTokens: number;
  calibration: Calibration;
  end: "abort" | "drain";
  /** Metric names for the mean batch size: [sum, count]. */
  batchMetrics?: [string, string];
}

/** One measured closed-loop run against a /generate server. */
export async function runHttpArm(options: HttpArmOptions): Promise<ArmRound> {
  const { calibration } = options;
  const completions: { at: number; tokens: number }[] = [];
  let textMismatches = 0;
  let before: Map<string, number> | undefined;
  let after: Map<string, number> | undefined;
  const [sumName, countName] = options.batchMetrics ?? ["batch_size_sum", "batch_size_count"];
  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;

  const result = await closedLoop({
    baseUrl: options.baseUrl,
    concurrency: options.concurrency,
    warmupMs: options.warmupMs,
    warmupAnswers: 1,
    durationMs: options.durationMs,
    end: options.end,
    timeoutMs: 300_000,
    nextRequest: (n) => ({ method: "POST", path: "/generate", body: JSON.stringify(wireRequest(n, options.maxNewTokens)) }),
    check: isGenerateAnswer,
    onWindowStart: async () => {
      before = await scrape(options.baseUrl);
      windowStart = performance.now();
    },
    onWindowEnd: async () => {
      windowEnd = performance.now();
      after = await scrape(options.baseUrl);
    },
    onAnswer: (n, body, at) => {
      if (at < windowStart || at > windowEnd) return;
      const index = n % PROMPTS.length;
      completions.push({ at, tokens: calibration.tokens[index]! });
      const text = (JSON.parse(body) as { text: string }).text;
      if (text !== calibration.texts[index]) textMismatches++;
    },
  });
  const windowTokens = completions.reduce((sum, c) => sum + c.tokens, 0);
  const delta = (name: string) => (after?.get(name) ?? Number.NaN) - (before?.get(name) ?? Number.NaN);
  const meanBatch = delta(sumName) / delta(countName);
  return {
    tokensPerSec: burstRate(completions, Number.isFinite(meanBatch) ? meanBatch : 1),
    tokensPerSecWindow: windowTokens / (result.windowMs / 1000),
    requestsPerSec: result.completed / (result.windowMs / 1000),
    p50Ms: percentile(result.latenciesMs, 50),
    p95Ms: percentile(result.latenciesMs, 95),
    completed: result.completed,
    errors: result.errors + result.otherErrors,
    errorSamples: result.errorSamples,
    meanBatch,
    textMismatches,
    warmupMs: result.warmupMs,
  };
}

/**
 * Waits until a server has nothing queued and its token counter has stopped moving (the
 * batch in flight when the clients left has ended), so the next arm starts on a quiet server.
 */
export async function waitIdle(baseUrl: string, boundMs = 60_000): Promise<void> {
  const deadline = performance.now() + boundMs;
  let last = Number.NaN;
  let still = 0;
  while (performance.now() < deadline) {
    const metrics = await scrape(baseUrl);
    const tokens = metrics.get("generated_tokens_total") ?? 0;
    const busy = (metrics.get("queue_depth") ?? 0) > 0 || (metrics.get("in_flight") ?? 0) > 0;
    still = !busy && tokens === last ? still + 1 : 0;
    if (still >= 2) return;
    last = tokens;
    await sleep(250);
  }
  throw new Error(`${baseUrl} still busy after ${boundMs / 1000} s`);
}
