/**
 * Closed-loop streaming client: N clients each POST a prompt to `<base>/generate/stream`
 * (server-sent events) and send the next when the stream ends. Records, per stream that
 * starts inside the window, the time to its first `data:` event (TTFT) and the gaps between
 * its events (inter-token gaps). Bounded: every stream has a timeout, the loop a deadline.
 */
import { Agent, request as httpRequest } from "node:http";

export interface StreamLoopOptions {
  baseUrl: string;
  clients: number;
  prompts: readonly string[];
  maxNewTokens: number;
  warmupMs: number;
  durationMs: number;
  streamTimeoutMs?: number;
}

export interface StreamLoopResult {
  streams: number;
  errors: number;
  firstTokenMs: number[];
  gapsMs: number[];
  /** data events (tokens) of the streams that started in the window, per second of window. */
  eventsPerSec: number;
}

interface OneStream {
  firstTokenMs: number;
  gapsMs: number[];
  events: number;
}

function streamOnce(agent: Agent, url: string, body: string, timeoutMs: number): Promise<OneStream> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let last = start;
    let firstTokenMs = Number.NaN;
    const gapsMs: number[] = [];
    let events = 0;
    let buffered = "";
    const req = httpRequest(
      url,
      { method: "POST", agent, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`status ${res.statusCode}`));
          return;
        }
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          buffered += chunk;
          let end: number;
          while ((end = buffered.indexOf("\n\n")) >= 0) {
            const event = buffered.slice(0, end);
            buffered = buffered.slice(end + 2);
            if (!event.startsWith("data:") || event.startsWith("data: [DONE]")) continue;
            const now = performance.now();
            if (events === 0) firstTokenMs = now - start;
            else gapsMs.push(now - last);
            last = now;
            events += 1;
          }
        });
        res.on("end", () => (events > 0 ? resolve({ firstTokenMs, gapsMs, events }) : reject(new Error("no token"))));
        res.on("error", reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`stream timeout after ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

export async function streamLoop(options: StreamLoopOptions): Promise<StreamLoopResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: options.clients });
  const url = `${options.baseUrl}/generate/stream`;
  const t0 = performance.now();
  // The window opens after the warm-up *and* once every client has had one answer: a closed
  // loop starts with every request queued at once, and until each client has gone round once
  // the figures are those of that first cohort.
  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;
  const hardEnd = t0 + options.warmupMs + options.durationMs + 180_000;
  let answered = 0;
  const openWindow = () => {
    if (windowStart !== Number.POSITIVE_INFINITY || answered < options.clients) return;
    windowStart = Math.max(performance.now(), t0 + options.warmupMs);
    windowEnd = windowStart + options.durationMs;
  };
  const result: StreamLoopResult = { streams: 0, errors: 0, firstTokenMs: [], gapsMs: [], eventsPerSec: 0 };
  let events = 0;
  let lastEnd = 0;
  let next = 0;
  await Promise.all(
    Array.from({ length: options.clients }, async () => {
      let first = true;
      for (;;) {
        const now = performance.now();
        if (now >= windowEnd || now >= hardEnd) break;
        const prompt = options.prompts[next++ % options.prompts.length]!;
        const body = JSON.stringify({ prompt, max_new_tokens: options.maxNewTokens, temperature: 1e-6, top_k: null });
        const started = performance.now();
        try {
          const one = await streamOnce(agent, url, body, options.streamTimeoutMs ?? 120_000);
          if (started >= windowStart && started < windowEnd) {
            result.streams += 1;
            result.firstTokenMs.push(one.firstTokenMs);
            result.gapsMs.push(...one.gapsMs);
            events += one.events;
            lastEnd = performance.now();
          }
        } catch {
          if (started >= windowStart) result.errors += 1;
        }
        if (first) {
          first = false;
          answered += 1;
          openWindow();
        }
      }
    }),
  );
  agent.destroy();
  result.eventsPerSec = events / ((lastEnd - windowStart) / 1000);
  return result;
}
