/**
 * A closed-loop HTTP load client: `concurrency` virtual clients, each sending its next request
 * as soon as the previous answer has arrived, over keep-alive connections (one per client).
 *
 * A run has a warm-up, then a measured window; only requests that complete inside the window
 * count. At the end of the window the clients stop and the requests still out are either
 * aborted (the socket is closed, so a server that drops disconnected work frees itself at once)
 * or drained (waited for, not counted). Every request has a timeout, and the run is bounded
 * in time and in count, so a run always ends by itself.
 */
import { Agent, request as httpRequest } from "node:http";
import { performance } from "node:perf_hooks";

export interface RequestSpec {
  method: "GET" | "POST";
  path: string;
  body?: string;
}

export interface ClosedLoopOptions {
  baseUrl: string;
  concurrency: number;
  warmupMs: number;
  /**
   * The warm-up also lasts until every client has had this many answers (default 0): a closed
   * loop starts with all clients queued at once, and until each has gone round once the
   * latencies are those of that first cohort, not of the steady state. Bounded by maxWarmupMs.
   */
  warmupAnswers?: number;
  /** Upper bound on the warm-up, ms; default 120 s. */
  maxWarmupMs?: number;
  durationMs: number;
  /** The n-th request of the run (0-based, across all clients). */
  nextRequest(n: number): RequestSpec;
  /** At the end of the window: close outstanding requests, or wait for them. */
  end: "abort" | "drain";
  /** Pause of each client after each answer, ms (default 0: back to back). */
  pauseMs?: number;
  /** Per-request timeout; default 120 s. */
  timeoutMs?: number;
  /** Upper bound on requests sent; default 1e6. */
  maxRequests?: number;
  /** Bound on the drain, ms; default 120 s. */
  drainTimeoutMs?: number;
  /** Is this 2xx answer what was asked for? Default: any 2xx. */
  check?(body: string): boolean;
  /** Awaited at the start and at the end of the window (e.g. to scrape server counters). */
  onWindowStart?(): Promise<void> | void;
  onWindowEnd?(): Promise<void> | void;
  /** Each good answer, whenever it arrives (warm-up included): request number, body, time. */
  onAnswer?(n: number, body: string, at: number): void;
}

export interface ClosedLoopResult {
  /** Measured window, ms (from the moment onWindowStart resolved to the end). */
  windowMs: number;
  /** Good answers completed inside the window. */
  completed: number;
  /** Non-2xx, failed checks, socket errors and timeouts inside the window. */
  errors: number;
  errorSamples: string[];
  /** Latencies (ms) of the good answers completed in the window. */
  latenciesMs: number[];
  /** Requests sent during the whole run (warm-up included). */
  sent: number;
  /** Requests aborted or left over at the end. */
  leftOver: number;
  /** Errors during the warm-up or the drain (not in `errors`). */
  otherErrors: number;
  /** How long the warm-up lasted, ms. */
  warmupMs: number;
}

export async function closedLoop(options: ClosedLoopOptions): Promise<ClosedLoopResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency, maxFreeSockets: options.concurrency });
  const timeoutMs = options.timeoutMs ?? 120_000;
  const maxRequests = options.maxRequests ?? 1_000_000;
  const outstanding = new Set<{ destroy(): void }>();
  const result: ClosedLoopResult = { windowMs: 0, completed: 0, errors: 0, errorSamples: [], latenciesMs: [], sent: 0, leftOver: 0, warmupMs: 0, otherErrors: 0 };

  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;
  let stopped = false;

  const inWindow = (t: number) => t >= windowStart && t <= windowEnd;
  const noteError = (t: number, why: string) => {
    if (!inWindow(t)) {
      result.otherErrors++;
      if (result.errorSamples.length < 5) result.errorSamples.push(`(outside the window) ${why}`);
      return;
    }
    result.errors++;
    if (result.errorSamples.length < 5) result.errorSamples.push(why);
  };

  const one = (n: number, spec: RequestSpec): Promise<void> =>
    new Promise((resolve) => {
      const started = performance.now();
      const headers: Record<string, string | number> = {};
      if (spec.body !== undefined) {
        headers["content-type"] = "application/json";
        headers["content-length"] = Buffer.byteLength(spec.body);
      }
      const req = httpRequest(`${options.baseUrl}${spec.path}`, { method: spec.method, agent, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => {
          outstanding.delete(req);
          const done = performance.now();
          const body = Buffer.concat(chunks).toString("utf8");
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) noteError(done, `HTTP ${status}: ${body.slice(0, 200)}`);
          else if (options.check && !options.check(body)) noteError(done, `unexpected body: ${body.slice(0, 200)}`);
          else {
            options.onAnswer?.(n, body, done);
            if (inWindow(done)) {
              result.completed++;
              result.latenciesMs.push(done - started);
            }
          }
          resolve();
        });
        res.on("error", () => undefined); // 'close' below settles it
        res.on("close", () => {
          if (outstanding.delete(req)) resolve();
        });
      });
      outstanding.add(req);
      req.setTimeout(timeoutMs, () => req.destroy(new Error(`timeout after ${timeoutMs} ms`)));
      req.on("error", (err) => {
        if (!outstanding.delete(req)) return;
        if (!stopped) noteError(performance.now(), err.message);
        resolve();
      });
      req.end(spec.body);
    });

  const answered = new Array<number>(options.concurrency).fill(0);
  const client = async (_: unknown, index: number) => {
    while (!stopped && result.sent < maxRequests) {
      const n = result.sent++;
      await one(n, options.nextRequest(n));
      answered[index]!++;
      if (options.pauseMs) await sleep(options.pauseMs);
    }
  };

  const runStart = performance.now();
  const clients = Array.from({ length: options.concurrency }, client);
  await sleepUntil(runStart + options.warmupMs);
  const cycles = options.warmupAnswers ?? 0;
  const warmupBound = runStart + (options.maxWarmupMs ?? 120_000);
  if (cycles > 0) await sleepUntil(warmupBound, () => answered.every((a) => a >= cycles));
  result.warmupMs = performance.now() - runStart;
  await options.onWindowStart?.();
  windowStart = performance.now();
  await sleepUntil(windowStart + options.durationMs, () => result.sent >= maxRequests);
  windowEnd = performance.now();
  stopped = true;
  await options.onWindowEnd?.();
  result.windowMs = windowEnd - windowStart;
  result.leftOver = outstanding.size;
  // Destroying a request settles it through its 'error' or 'close' handler.
  if (options.end === "abort") for (const req of [...outstanding]) req.destroy();
  const drained = Promise.all(clients);
  const bound = options.drainTimeoutMs ?? 120_000;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = await Promise.race([
    drained.then(() => false),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), bound))),
  ]);
  clearTimeout(timer);
  if (timedOut) {
    for (const req of [...outstanding]) req.destroy();
    await drained;
  }
  agent.destroy();
  return result;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** Sleeps until `deadline` (performance.now() time), waking early when `stop()` says so. */
async function sleepUntil(deadline: number, stop?: () => boolean): Promise<void> {
  while (performance.now() < deadline) {
    if (stop?.()) return;
    await sleep(Math.min(100, deadline - performance.now()));
  }
}
