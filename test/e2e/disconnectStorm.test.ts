/**
 * A disconnect storm against the real server entry as its own process (what `npm start` runs):
 * 100 streams dropped mid-generation and 20 /generate requests dropped while running or
 * queued. Read from outside, through /metrics and /proc/<pid>: every drop was counted as
 * such, the engine goes idle, and a second storm leaves no thread, descriptor or memory
 * behind compared with the first.
 *
 * The server runs in its own process so that its event loop hears each close at once; the
 * demo model at 100 rows takes seconds for 512 tokens, so every stream is still generating
 * when its client leaves.
 */
import { expect } from "chai";
import { readdirSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";
import { scrape, valueOf, type Exposition } from "../helpers/metrics.js";
import { ServerProcess } from "./serverProcess.js";

const STREAMS = 100;
const REQUESTS = 20;
const BATCH = 4;
const TOKENS = 512;

/** Polls `check` until it holds (bounded): for states another process reaches. */
async function eventually(check: () => Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

interface Footprint {
  threads: number;
  fds: number;
  rssMiB: number;
}

function footprint(pid: number): Footprint {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)?.[1]);
  return { threads: field("Threads"), fds: readdirSync(`/proc/${pid}/fd`).length, rssMiB: field("VmRSS") / 1024 };
}

/** The footprint once threads and descriptors have held still for 300 ms (pools wind down after use). */
async function settledFootprint(pid: number): Promise<Footprint> {
  let last = footprint(pid);
  for (let stableSince = Date.now(), end = Date.now() + 10_000; Date.now() - stableSince < 300 && Date.now() < end; ) {
    await new Promise((resolve) => setTimeout(resolve, 25));
    const now = footprint(pid);
    if (now.threads !== last.threads || now.fds !== last.fds) stableSince = Date.now();
    last = now;
  }
  return last;
}

describe("disconnect storm against the server process", function () {
  this.timeout(180_000);
  let server: ServerProcess;
  let base: string;
  let port: number;

  before(async () => {
    server = new ServerProcess({
      SERVICE_CKPT: join(repoRoot, "models", "brown-gpt.pt"),
      SERVICE_THREADS: "1",
      MAX_ACTIVE_STREAMS: String(2 * STREAMS),
      MAX_BATCH_SIZE: String(BATCH),
      // The first batch waits until it is full: 4 run and 16 queue behind them.
      MAX_WAIT_MS: "1000",
    });
    base = (await server.ready()).text;
    port = Number(new URL(base).port);
  });
  after(async () => {
    await server?.stop();
  });

  const generated = async (): Promise<number> => valueOf(await scrape(base), "generated_tokens_total");

  /** Each stream's socket is destroyed as soon as its first event arrives. Returns the tokens they cost. */
  async function dropStreams(): Promise<number> {
    const before = await generated();
    await Promise.all(Array.from({ length: STREAMS }, (_, i) => new Promise<void>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, path: "/generate/stream", method: "POST", agent: false,
        headers: { "content-type": "application/json" } }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`stream ${i} answered ${res.statusCode}`));
        res.once("data", () => {
          req.destroy();
          resolve();
        });
      });
      req.on("error", () => {});
      req.end(JSON.stringify({ prompt: "Once upon a time", max_new_tokens: TOKENS, seed: i }));
    })));
    await engineIdle();
    return (await generated()) - before;
  }

  /** 20 long /generate requests: one batch of 4 runs, 16 wait; all are dropped. Returns the tokens they cost. */
  async function dropRequests(): Promise<number> {
    const before = await generated();
    const controllers = Array.from({ length: REQUESTS }, () => new AbortController());
    const requests = controllers.map((controller, i) =>
      fetch(`${base}/generate`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "Once", max_new_tokens: TOKENS, seed: i }),
        signal: controller.signal,
      }).then(
        (answer) => { throw new Error(`a dropped request was answered ${answer.status}`); },
        () => undefined,
      ),
    );
    await eventually(async () => valueOf(await scrape(base), "queue_depth") >= REQUESTS - BATCH, "the requests to queue");
    for (const controller of controllers) controller.abort();
    await Promise.all(requests);
    await engineIdle();
    return (await generated()) - before;
  }

  /** No stream or queued request is left, and the engine generates nothing but what it is asked for. */
  async function engineIdle(): Promise<void> {
    await eventually(async () => {
      const metrics = await scrape(base);
      return valueOf(metrics, "active_streams") === 0 && valueOf(metrics, "queue_depth") === 0;
    }, "no stream or queued request");
    await eventually(async () => {
      const before = await generated();
      const answer = await fetch(`${base}/generate`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "Once", max_new_tokens: 3, seed: 1 }),
      });
      expect(answer.status).to.equal(200);
      await answer.text();
      return (await generated()) - before === 3;
    }, "the engine to be idle");
  }

  async function storm(): Promise<{ metrics: Exposition; streamTokens: number; requestTokens: number }> {
    const streamTokens = await dropStreams();
    const requestTokens = await dropRequests();
    return { metrics: await scrape(base), streamTokens, requestTokens };
  }

  it("every drop is counted, the engine goes idle, and a second storm leaves nothing behind", async () => {
    await storm(); // warm-up: pools, caches and the allocator's arenas grow on first use
    const pid = server.child.pid!;
    const before = await settledFootprint(pid);
    const first = await scrape(base);
    const count = (metrics: Exposition, route: string, status: string): number =>
      valueOf(metrics, "http_requests_total", { method: "POST", route, status });

    const { metrics: after, streamTokens, requestTokens } = await storm();
    // Streams: all 100 answered 200 and every one was cut mid-generation (none ran to its
    // end), and the engine stopped their rows: a small part of the 51,200 tokens asked for.
    expect(count(after, "/generate/stream", "200") - count(first, "/generate/stream", "200")).to.equal(STREAMS);
    expect(valueOf(after, "stream_cancelled_total") - valueOf(first, "stream_cancelled_total")).to.equal(STREAMS);
    expect(streamTokens).to.be.below((STREAMS * TOKENS) / 4);
    // Requests: all 20 left before an answer (499), and those still queued never reached the
    // engine: the storm cost at most two batches' tokens (the running one, and the next if it
    // started in the instant between the queue being read and the drop), not five.
    expect(count(after, "/generate", "499") - count(first, "/generate", "499")).to.equal(REQUESTS);
    expect(requestTokens).to.be.at.most(2 * BATCH * TOKENS);
    expect(valueOf(after, "active_streams")).to.equal(0);
    expect(valueOf(after, "queue_depth")).to.equal(0);

    // From outside the process: threads and descriptors back where the first storm left them;
    // memory within a bound (the allocator keeps freed pages; 100 leaked KV caches and
    // sockets would be far above it).
    let now = await settledFootprint(pid);
    await eventually(async () => (now = await settledFootprint(pid)).fds <= before.fds, "descriptors to close").catch(() => {});
    expect(now.threads, "threads").to.equal(before.threads);
    expect(now.fds, "file descriptors").to.be.at.most(before.fds);
    const grownMiB = now.rssMiB - before.rssMiB;
    expect(grownMiB).to.be.lessThan(64);
    expect(server.log.filter((line) => line.level >= 50), server.transcript()).to.deep.equal([]);
    console.log(
      `      storm: ${STREAMS} streams cut mid-generation (${streamTokens} tokens spent), ${REQUESTS} requests dropped (${REQUESTS - BATCH} queued, ${requestTokens} tokens spent);` +
        ` threads ${before.threads} -> ${now.threads}, fds ${before.fds} -> ${now.fds}, rss ${grownMiB >= 0 ? "+" : ""}${grownMiB.toFixed(1)} MiB`,
    );
  });
});
