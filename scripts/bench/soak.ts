/**
 * Soak: the server (`npm start` entry: text app + recsys app, one process) under steady,
 * moderate, mixed load for a while, sampling its memory, event-loop delay and handles.
 *
 *   node dist/scripts/bench/soak.js [--minutes 10] [--ckpt models/brown-gpt.pt]
 *
 * The mix, all closed loop and bounded (each request has a timeout, the run a deadline):
 *   - /generate, sampled (temperature 0.8, top_k 40, a seed per request); one request in
 *     ten is abandoned by its client after 50 ms (leaves the queue, or cancels its row);
 *   - /generate/stream; every other stream is cancelled by its client after 3 pieces;
 *   - /recommend/{id}, known and unknown users, paced;
 *   - an invalid /generate body now and then (422 path).
 * Memory is compared after warm-up: RSS as the median of the first minute after it against
 * the median of the last minute (target: within 10%), plus its trend (MB per minute); the
 * V8 heap, a sawtooth whose samples say little, after a full GC (the server runs with
 * --expose-gc through lib/gcServer.ts; SIGUSR2 collects) at the end of the warm-up, every
 * 2 minutes and just before the load stops.
 * After the load, the process's threads, fds and active handles are compared with before.
 * An idle canary process measures its own event-loop delay alongside: on a shared machine,
 * a spike both see is the machine's, not the server's.
 */
import { request as httpRequest, Agent } from "node:http";
import { performance } from "node:perf_hooks";
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";

import { parseFlags, numberFlag, stringFlag } from "./lib/args.js";
import { readRss, readThreads, type Child } from "./lib/child.js";
import { scrape, send, sleep } from "./lib/http.js";
import { LoadSampler, machineFacts } from "./lib/machine.js";
import { repoRoot, textCheckpoint } from "./lib/paths.js";
import { PROMPTS } from "./lib/prompts.js";
import { writeResults } from "./lib/results.js";
import { startBareExpress, startOurServer, type OurServer } from "./lib/servers.js";
import { fmt, median, table, verdict } from "./lib/stats.js";

const USAGE = `usage: node dist/scripts/bench/soak.js [options]
  --minutes M            duration of the load (default 10; --quick 2)
  --warmup-minutes M     not compared: allocators and JIT settle (default 1; --quick 0.5)
  --sample-seconds S     sampling interval (default 5; --quick 2)
  --ckpt PATH            text checkpoint (default models/brown-gpt.pt)
  --generate-clients N   /generate clients (default 6)
  --stream-clients N     /generate/stream clients (default 2)
  --recommend-clients N  /recommend clients, each pausing 20 ms between requests (default 4)
  --quick                a 2-minute smoke run`;

interface Sample {
  t: number; // seconds since load start
  rssMB: number;
  heapUsedMB: number;
  heapTotalMB: number;
  externalMB: number;
  loopP99Ms: number;
  loopMaxMs: number;
  /** The same measure in an idle canary process: what the machine alone does to a loop. */
  canaryP99Ms: number;
  canaryMaxMs: number;
  handles: number;
  fds: number;
  threads: number;
  load1: number;
}

interface Tally {
  generateOk: number;
  generateAbandoned: number;
  streamsCompleted: number;
  streamsCancelled: number;
  recommendOk: number;
  invalid422: number;
  unexpected: number;
  unexpectedSamples: string[];
}

const MAX_NEW_TOKENS = 32;

function body(n: number): string {
  return JSON.stringify({ prompt: PROMPTS[n % PROMPTS.length], max_new_tokens: MAX_NEW_TOKENS, temperature: 0.8, top_k: 40, seed: n });
}

/** One request; `abandonAfterMs` closes the connection before the answer. Resolves with the status (0: abandoned/failed). */
function post(agent: Agent, url: string, payload: string, abandonAfterMs?: number): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { method: "POST", agent, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      res.on("error", () => resolve({ status: 0, text: "response error" }));
    });
    req.setTimeout(120_000, () => req.destroy(new Error("timeout")));
    req.on("error", (err) => resolve({ status: 0, text: err.message }));
    if (abandonAfterMs !== undefined) setTimeout(() => req.destroy(), abandonAfterMs);
    req.end(payload);
  });
}

/** A stream read to [DONE], or cancelled (socket closed) after `cancelAfter` pieces. */
function stream(agent: Agent, url: string, payload: string, cancelAfter?: number): Promise<"done" | "cancelled" | string> {
  return new Promise((resolve) => {
    const req = httpRequest(url, { method: "POST", agent, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(payload) } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        resolve(`stream HTTP ${res.statusCode}`);
        return;
      }
      let text = "";
      let pieces = 0;
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        text += d;
        pieces += d.split("data: ").length - 1;
        if (cancelAfter !== undefined && pieces >= cancelAfter && !text.includes("data: [DONE]")) {
          req.destroy();
          resolve("cancelled");
        }
      });
      res.on("end", () => resolve(text.includes("data: [DONE]") ? "done" : `stream ended without [DONE]: ${text.slice(-200)}`));
      res.on("error", () => undefined);
    });
    req.setTimeout(120_000, () => req.destroy(new Error("timeout")));
    req.on("error", (err) => resolve(cancelAfter !== undefined ? "cancelled" : err.message));
    req.end(payload);
  });
}

function knownIds(): number[] {
  const file = join(repoRoot, ".cache", "bench", "recsys-known-ids.txt");
  if (existsSync(file)) return readFileSync(file, "utf8").split("\n").filter(Boolean).map(Number);
  return Array.from({ length: 2000 }, (_, i) => i + 1); // the demo recommender's users are mostly 1..~2600
}

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2), USAGE, [
    "minutes", "warmup-minutes", "sample-seconds", "ckpt", "generate-clients", "stream-clients", "recommend-clients", "quick",
  ]);
  const quick = flags.has("quick");
  const minutes = numberFlag(flags, "minutes", quick ? 2 : 10);
  const warmupMinutes = numberFlag(flags, "warmup-minutes", quick ? 0.5 : 1);
  const sampleMs = numberFlag(flags, "sample-seconds", quick ? 2 : 5) * 1000;
  const checkpoint = textCheckpoint(flags.get("ckpt") === undefined ? undefined : stringFlag(flags, "ckpt", ""));
  const generateClients = numberFlag(flags, "generate-clients", 6);
  const streamClients = numberFlag(flags, "stream-clients", 2);
  const recommendClients = numberFlag(flags, "recommend-clients", 4);
  if (minutes < warmupMinutes + 1) throw new Error("--minutes must exceed --warmup-minutes by at least 1");

  const machine = machineFacts();
  console.log(`soak: ${checkpoint}, ${minutes} min (first ${warmupMinutes} min warm-up), sample every ${sampleMs / 1000} s`);
  console.log(`  ${machine.cpu}, ${machine.cores} cores, node ${machine.node}, load ${machine.loadAtStart.toFixed(2)}`);
  console.log(`  load: ${generateClients} /generate (1 in 10 abandoned), ${streamClients} /generate/stream (1 in 2 cancelled), ` +
    `${recommendClients} /recommend (paced), a 422 every 500 ms`);

  let server: OurServer | undefined;
  let canary: Child<{ url: string }> | undefined;
  const loadAvg = new LoadSampler();
  try {
    let gcWaiter: ((line: Record<string, unknown>) => void) | undefined;
    [server, canary] = await Promise.all([
      startOurServer({ checkpoint, gcProbe: true, onJson: (line) => (line.benchGc !== undefined ? gcWaiter?.(line) : undefined) }),
      startBareExpress(),
    ]);
    const serverPid = server.pid;
    /** A full GC in the server (SIGUSR2, see lib/gcServer.ts); the heap after it. */
    const fullGc = (): Promise<{ heapUsedMB: number; rssMB: number }> =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no answer to SIGUSR2 (full GC) within 10 s")), 10_000);
        gcWaiter = (line) => {
          clearTimeout(timer);
          gcWaiter = undefined;
          if (line.benchGc !== true) reject(new Error("the server runs without --expose-gc"));
          else resolve({ heapUsedMB: Number(line.heapUsed) / 2 ** 20, rssMB: Number(line.rss) / 2 ** 20 });
        };
        process.kill(serverPid, "SIGUSR2");
      });
    const canaryUrl = canary.info.url;
    const { text, recsys } = server.info;
    const pid = server.pid;
    const users = knownIds();

    const sampleOnce = async (t: number): Promise<Sample> => {
      const m = await scrape(text); // the text app's registry; resets its loop-delay histogram
      const c = JSON.parse((await send(`${canaryUrl}/lag`)).body) as { p99_ms: number; max_ms: number };
      let handles = 0;
      for (const [name, value] of m) if (name.startsWith("nodejs_active_handles{")) handles += value;
      return {
        t,
        rssMB: readRss(pid) / 2 ** 20,
        heapUsedMB: (m.get("nodejs_heap_size_used_bytes") ?? Number.NaN) / 2 ** 20,
        heapTotalMB: (m.get("nodejs_heap_size_total_bytes") ?? Number.NaN) / 2 ** 20,
        externalMB: (m.get("nodejs_external_memory_bytes") ?? Number.NaN) / 2 ** 20,
        loopP99Ms: (m.get("nodejs_eventloop_lag_p99_seconds") ?? Number.NaN) * 1000,
        loopMaxMs: (m.get("nodejs_eventloop_lag_max_seconds") ?? Number.NaN) * 1000,
        canaryP99Ms: c.p99_ms,
        canaryMaxMs: c.max_ms,
        handles,
        fds: m.get("process_open_fds") ?? Number.NaN,
        threads: readThreads(pid),
        load1: loadAvg.samples[loadAvg.samples.length - 1] ?? Number.NaN,
      };
    };

    await sleep(1000);
    const before = await sampleOnce(0);
    const tally: Tally = { generateOk: 0, generateAbandoned: 0, streamsCompleted: 0, streamsCancelled: 0, recommendOk: 0, invalid422: 0, unexpected: 0, unexpectedSamples: [] };
    const unexpected = (why: string) => {
      tally.unexpected++;
      if (tally.unexpectedSamples.length < 5) tally.unexpectedSamples.push(why);
    };

    const start = performance.now();
    const deadline = start + minutes * 60_000;
    const running = () => performance.now() < deadline;
    const agent = new Agent({ keepAlive: true, maxSockets: 64 });
    let n = 0; // request number: prompt and seed
    let generated = 0;
    let streamed = 0;

    const generateLoop = async () => {
      while (running()) {
        const i = n++;
        const abandon = generated++ % 10 === 9;
        const reply = await post(agent, `${text}/generate`, body(i), abandon ? 50 : undefined);
        if (abandon && reply.status === 0) tally.generateAbandoned++;
        else if (reply.status === 200) tally.generateOk++;
        else unexpected(`/generate ${reply.status}: ${reply.text.slice(0, 200)}`);
      }
    };
    const streamLoop = async () => {
      while (running()) {
        const i = n++;
        const cancel = streamed++ % 2 === 0;
        const outcome = await stream(agent, `${text}/generate/stream`, body(i), cancel ? 3 : undefined);
        if (outcome === "cancelled") tally.streamsCancelled++;
        else if (outcome === "done") tally.streamsCompleted++;
        else unexpected(outcome);
      }
    };
    const recommendLoop = async () => {
      while (running()) {
        const unknown = Math.random() < 0.2;
        const id = unknown ? 900_000_000 + Math.floor(Math.random() * 1e6) : users[Math.floor(Math.random() * users.length)]!;
        const reply = await send(`${recsys}/recommend/${id}?k=10`, { agent }).catch((err: Error) => ({ status: 0, body: err.message }));
        if (reply.status === 200) tally.recommendOk++;
        else unexpected(`/recommend ${reply.status}: ${reply.body.slice(0, 200)}`);
        await sleep(20);
      }
    };
    const invalidLoop = async () => {
      while (running()) {
        const reply = await send(`${text}/generate`, { method: "POST", body: JSON.stringify({ prompt: "", max_new_tokens: "5" }), agent }).catch((err: Error) => ({ status: 0, body: err.message }));
        if (reply.status === 422) tally.invalid422++;
        else unexpected(`invalid body answered ${reply.status}`);
        await sleep(500);
      }
    };

    const samples: Sample[] = [];
    const sampler = (async () => {
      let next = start + sampleMs;
      while (running()) {
        await sleep(Math.max(0, next - performance.now()));
        next += sampleMs;
        const s = await sampleOnce((performance.now() - start) / 1000);
        samples.push(s);
        if (samples.length % Math.max(1, Math.round(30_000 / sampleMs)) === 0) {
          console.log(`  ${fmt(s.t / 60, 1)} min  rss ${fmt(s.rssMB, 1)} MB  heap ${fmt(s.heapUsedMB, 1)} MB  loop p99 ${fmt(s.loopP99Ms, 1)} ms` +
            `  handles ${s.handles}  threads ${s.threads}  ok: gen ${tally.generateOk} streams ${tally.streamsCompleted}+${tally.streamsCancelled} cancelled rec ${tally.recommendOk}`);
        }
      }
    })();

    // Full GCs: at the end of the warm-up, every 2 minutes, and just before the load stops.
    const gcSamples: { t: number; heapUsedMB: number; rssMB: number }[] = [];
    const gcTimes: number[] = [];
    for (let t = warmupMinutes * 60; t < minutes * 60 - 30; t += 120) gcTimes.push(t);
    gcTimes.push(minutes * 60 - 3);
    const gcLoop = (async () => {
      for (const at of gcTimes) {
        await sleep(start + at * 1000 - performance.now());
        if (!running()) break;
        const t = (performance.now() - start) / 1000;
        gcSamples.push({ t, ...(await fullGc()) });
      }
    })();

    await Promise.all([
      gcLoop,
      ...Array.from({ length: generateClients }, generateLoop),
      ...Array.from({ length: streamClients }, streamLoop),
      ...Array.from({ length: recommendClients }, recommendLoop),
      invalidLoop(),
      sampler,
    ]);
    agent.destroy();
    // Let cancelled work finish and idle sockets close, then look at what is left.
    await sleep(10_000);
    const after = await sampleOnce((performance.now() - start) / 1000);
    const loadDuring = loadAvg.stop();

    const window = (from: number, to: number) => samples.filter((s) => s.t >= from && s.t < to);
    const warm = warmupMinutes * 60;
    const early = window(warm, warm + 60);
    const late = window(minutes * 60 - 60, minutes * 60 + 1);
    const cmp = (f: (s: Sample) => number) => {
      const a = median(early.map(f));
      const b = median(late.map(f));
      return { start: a, end: b, changePct: ((b - a) / a) * 100 };
    };
    const rss = cmp((s) => s.rssMB);
    const heap = cmp((s) => s.heapUsedMB);

    const external = cmp((s) => s.externalMB);
    const steady = samples.filter((s) => s.t >= warm);
    // Loop-delay samples whose interval holds a forced GC are left out of the loop figures.
    const gcFree = steady.filter((s) => !gcSamples.some((g) => g.t > s.t - sampleMs / 1000 - 1 && g.t <= s.t + 0.5));
    const heapAfterGc = {
      start: gcSamples[0]?.heapUsedMB ?? Number.NaN,
      end: gcSamples[gcSamples.length - 1]?.heapUsedMB ?? Number.NaN,
      changePct: Number.NaN,
      all: gcSamples.map((g) => Math.round(g.heapUsedMB * 10) / 10),
    };
    heapAfterGc.changePct = ((heapAfterGc.end - heapAfterGc.start) / heapAfterGc.start) * 100;
    const slope = trend(steady.map((s) => [s.t / 60, s.rssMB]));
    const loop = {
      p99Ms: median(gcFree.map((s) => s.loopP99Ms)),
      maxMs: Math.max(...gcFree.map((s) => s.loopMaxMs)),
      medianMaxMs: median(gcFree.map((s) => s.loopMaxMs)),
      canaryP99Ms: median(gcFree.map((s) => s.canaryP99Ms)),
      canaryMaxMs: Math.max(...gcFree.map((s) => s.canaryMaxMs)),
      canaryMedianMaxMs: median(gcFree.map((s) => s.canaryMaxMs)),
    };

    console.log("\n" + table(
      ["memory (median of a minute)", "after warm-up", "last minute", "change", "target", ""],
      [
        ["RSS, MB", fmt(rss.start, 1), fmt(rss.end, 1), `${fmt(rss.changePct, 1)}%`, "within 10%", verdict(rss.changePct <= 10)],
        ["V8 heap after a full GC, MB", fmt(heapAfterGc.start, 1), fmt(heapAfterGc.end, 1), `${fmt(heapAfterGc.changePct, 1)}%`, "within 10%", verdict(heapAfterGc.changePct <= 10)],
        ["V8 heap used (sawtooth, median), MB", fmt(heap.start, 1), fmt(heap.end, 1), `${fmt(heap.changePct, 1)}%`, "", ""],
        ["external (Buffers), MB", fmt(external.start, 1), fmt(external.end, 1), `${fmt(external.changePct, 1)}%`, "", ""],
      ],
    ));
    console.log(`RSS trend after warm-up: ${fmt(slope, 2)} MB/min (least squares over ${steady.length} samples)`);
    console.log(`V8 heap after each full GC (at ${gcSamples.map((g) => fmt(g.t / 60, 1)).join(", ")} min): ${heapAfterGc.all.join(", ")} MB`);
    console.log("\n" + table(
      [`event-loop delay, ${sampleMs / 1000}-s intervals after warm-up, forced GCs left out (10 ms sampling: idle ~10)`, "p99 (median)", "max (median)", "max (worst)"],
      [
        ["the server", fmt(loop.p99Ms, 1), fmt(loop.medianMaxMs, 1), fmt(loop.maxMs, 1)],
        ["an idle canary process (the machine alone)", fmt(loop.canaryP99Ms, 1), fmt(loop.canaryMedianMaxMs, 1), fmt(loop.canaryMaxMs, 1)],
      ],
    ));
    console.log("\n" + table(
      ["process", "before load", "10 s after load"],
      [
        ["threads", String(before.threads), String(after.threads)],
        ["open fds", String(before.fds), String(after.fds)],
        ["active handles", String(before.handles), String(after.handles)],
        ["RSS, MB", fmt(before.rssMB, 1), fmt(after.rssMB, 1)],
      ],
    ));
    console.log(`\nrequests: /generate ${tally.generateOk} ok + ${tally.generateAbandoned} abandoned; streams ${tally.streamsCompleted} completed + ` +
      `${tally.streamsCancelled} cancelled; /recommend ${tally.recommendOk}; 422 ${tally.invalid422}; unexpected ${tally.unexpected}` +
      (tally.unexpectedSamples.length ? ` (${tally.unexpectedSamples.join(" | ")})` : ""));
    const m = await scrape(text);
    console.log(`server counters: stream_cancelled_total ${m.get("stream_cancelled_total")}, generated_tokens_total ${m.get("generated_tokens_total")}`);
    console.log(`load average (1 min) during the run: ${loadDuring.min.toFixed(2)}-${loadDuring.max.toFixed(2)}, mean ${loadDuring.mean}`);

    const file = writeResults("soak", {
      benchmark: "soak",
      date: new Date().toISOString(),
      machine,
      loadDuring,
      settings: { checkpoint, minutes, warmupMinutes, sampleMs, generateClients, streamClients, recommendClients, maxNewTokens: MAX_NEW_TOKENS },
      memory: { rss, heapAfterGc, heap, external, rssTrendMBPerMin: slope },
      gcSamples,
      loop,
      before,
      after,
      tally,
      samples,
    });
    console.log(`results: ${file}`);
  } finally {
    loadAvg.stop();
    await Promise.all([server?.stop(), canary?.stop()]);
  }
}

/** Least-squares slope of y over x. */
function trend(points: [number, number][]): number {
  const n = points.length;
  if (n < 2) return Number.NaN;
  const mx = points.reduce((s, p) => s + p[0], 0) / n;
  const my = points.reduce((s, p) => s + p[1], 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return num / den;
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
