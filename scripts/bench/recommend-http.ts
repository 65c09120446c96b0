/**
 * GET /recommend/{id}?k=10 under 64 connections (wrk, closed loop), random known and
 * unknown users, beside a bare Express route answering a constant of the same shape,
 * alternating round by round; and the servers' event-loop delay during the load.
 *
 *   node dist/scripts/bench/recommend-http.js [--quick]
 *
 * A third, diagnostic arm (createRecsysApp around a constant recommender) splits the gap
 * into the HTTP layer's share and the model call's share.
 * After each wrk run, the same arm gets a moderate paced load (8 clients pausing 10 ms),
 * where a loop blocked by scoring would stand out more than under saturation.
 * Targets (DESIGN.md section 6): throughput within 20% of the bare route (ratio >= 0.8);
 * scoring never blocks the event loop (the app's event-loop delay stays at the bare
 * route's level: scoring runs on the addon's thread, not on the loop).
 */
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { Agent } from "node:http";
import { join } from "node:path";

import { parseFlags, numberFlag, stringFlag } from "./lib/args.js";
import { readCpuSeconds, type Child } from "./lib/child.js";
import { scrape, send, sleep } from "./lib/http.js";
import { LoadSampler, machineFacts } from "./lib/machine.js";
import { benchSrc, DEMO_RECSYS_MODEL, repoRoot, textCheckpoint } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { startBareExpress, startConstRecsys, startOurServer, type OurServer } from "./lib/servers.js";
import { closedLoop } from "./lib/loadClient.js";
import { fmt, fmtSpread, median, percentile, spread, table, verdict } from "./lib/stats.js";

const USAGE = `usage: node dist/scripts/bench/recommend-http.js [options]
  --recsys-ckpt PATH   recommender checkpoint (default models/recsys-demo.pt)
  --ckpt PATH          text checkpoint the server also loads (default models/brown-gpt.pt)
  --rounds N           rounds (default 4; --quick 1)
  --seconds S          measured wrk run per arm (default 6; --quick 5)
  --warmup S           wrk warm-up run per arm, discarded (default 2; --quick 1)
  --connections N      wrk connections (default 64)
  --wrk-threads N      wrk threads (default 1: the other core is the server's)
  --unknown-share X    share of requests for unknown users (default 0.2)
  --k N                k (default 10)
  --paced-clients N    clients of the paced phase (default 8), each pausing
  --paced-pause-ms MS  between answers (default 10): a moderate load after each wrk run
  --quick              one short round`;

interface WrkSummary {
  requests: number;
  duration_us: number;
  bytes: number;
  unknown_sent: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  latency_us: { p50: number; p95: number; p99: number; max: number; mean: number };
}

/** Event-loop delay over one interval, ms (monitorEventLoopDelay at 10 ms resolution). */
interface LagSample {
  p99Ms: number;
  maxMs: number;
  meanMs: number;
}

interface ArmRun {
  requestsPerSec: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
  errors: number;
  /** CPU time of the server process (all threads) per answered request, microseconds. */
  cpuUsPerRequest: number;
  /** One sample per probe interval during the measured run. */
  lag: LagSample[];
  /** Fallback answers beyond the unknown users sent (latency budget or overload). */
  extraFallbacks?: number;
  /** The moderate, paced load after the saturating one. */
  paced?: { requestsPerSec: number; p50Ms: number; p99Ms: number; errors: number; lag: LagSample[] };
}

function runWrk(url: string, seconds: number, connections: number, threads: number, env: NodeJS.ProcessEnv): Promise<WrkSummary> {
  return new Promise((resolve, reject) => {
    const args = ["-t", String(threads), "-c", String(connections), "-d", `${seconds}s`, "--timeout", "10s",
      "-s", join(benchSrc, "wrk", "recommend.lua"), url];
    const wrk = spawn("wrk", args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    wrk.stdout.on("data", (d: Buffer) => (out += d.toString()));
    wrk.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const killer = setTimeout(() => wrk.kill("SIGKILL"), (seconds + 30) * 1000);
    wrk.on("error", (e) => reject(new Error(`wrk: ${e.message} (install it: bash scripts/setup.sh --bench)`)));
    wrk.on("exit", (code) => {
      clearTimeout(killer);
      const line = out.split("\n").find((l) => l.startsWith('{"wrk"'));
      if (code !== 0 || !line) reject(new Error(`wrk exited ${code}: ${err || out}`));
      else resolve(JSON.parse(line) as WrkSummary);
    });
  });
}

/** Known users: those the server answers without a fallback, among ids 1..maxId. */
async function knownUsers(recsysUrl: string, maxId: number): Promise<number[]> {
  const agent = new Agent({ keepAlive: true, maxSockets: 16 });
  const known: number[] = [];
  let next = 1;
  const worker = async () => {
    while (next <= maxId) {
      const id = next++;
      const reply = await send(`${recsysUrl}/recommend/${id}?k=1`, { agent });
      if (reply.status === 200 && (JSON.parse(reply.body) as { fallback: boolean }).fallback === false) known.push(id);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  agent.destroy();
  return known.sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2), USAGE, [
    "recsys-ckpt", "ckpt", "rounds", "seconds", "warmup", "connections", "wrk-threads", "unknown-share", "k", "paced-clients", "paced-pause-ms", "quick",
  ]);
  const quick = flags.has("quick");
  const recsysCheckpoint = stringFlag(flags, "recsys-ckpt", DEMO_RECSYS_MODEL);
  const checkpoint = textCheckpoint(flags.get("ckpt") === undefined ? undefined : stringFlag(flags, "ckpt", ""));
  const rounds = numberFlag(flags, "rounds", quick ? 1 : 4);
  const seconds = numberFlag(flags, "seconds", quick ? 5 : 6);
  const warmup = numberFlag(flags, "warmup", quick ? 1 : 2);
  const connections = numberFlag(flags, "connections", 64);
  const wrkThreads = numberFlag(flags, "wrk-threads", 1);
  const unknownShare = numberFlag(flags, "unknown-share", 0.2);
  const k = numberFlag(flags, "k", 10);
  const pacedClients = numberFlag(flags, "paced-clients", 8);
  const pacedPauseMs = numberFlag(flags, "paced-pause-ms", 10);

  const machine = machineFacts();
  console.log(`recommend-http: ${recsysCheckpoint}`);
  console.log(`  ${machine.cpu}, ${machine.cores} cores, node ${machine.node}, load ${machine.loadAtStart.toFixed(2)}`);
  console.log(`  wrk -t${wrkThreads} -c${connections}, ${rounds} round(s) x ${seconds} s per arm, k=${k}, ${unknownShare * 100}% unknown users`);

  let ours: OurServer | undefined;
  let bare: Child<{ url: string }> | undefined;
  let constApp: Child<{ url: string }> | undefined;
  const load = new LoadSampler();
  try {
    [ours, bare, constApp] = await Promise.all([
      startOurServer({ checkpoint, recsysCheckpoint }),
      startBareExpress(),
      startConstRecsys(),
    ]);
    const users = await knownUsers(ours.info.recsys, 4000);
    if (users.length === 0) throw new Error("no known users among ids 1..4000: is this the demo recommender?");
    const idsFile = join(repoRoot, ".cache", "bench", "recsys-known-ids.txt");
    mkdirSync(join(repoRoot, ".cache", "bench"), { recursive: true });
    writeFileSync(idsFile, users.join("\n") + "\n");
    console.log(`  ${users.length} known users found among ids 1..4000\n`);
    const wrkEnv = { WRK_IDS_FILE: idsFile, WRK_UNKNOWN_SHARE: String(unknownShare), WRK_K: String(k) };

    const promLag = (url: string) => async (): Promise<LagSample> => {
      const m = await scrape(url);
      return {
        p99Ms: (m.get("nodejs_eventloop_lag_p99_seconds") ?? Number.NaN) * 1000,
        maxMs: (m.get("nodejs_eventloop_lag_max_seconds") ?? Number.NaN) * 1000,
        meanMs: (m.get("nodejs_eventloop_lag_mean_seconds") ?? Number.NaN) * 1000,
      };
    };
    const arms = {
      ours: {
        label: "ours: createRecsysApp + TorchRecommender",
        url: ours.info.recsys,
        pid: ours.pid,
        lag: promLag(ours.info.recsys),
      },
      app: {
        label: "createRecsysApp + constant (diagnostic)",
        url: constApp.info.url,
        pid: constApp.pid,
        lag: promLag(constApp.info.url),
      },
      bare: {
        label: "bare Express route, constant JSON",
        url: bare.info.url,
        pid: bare.pid,
        lag: async (): Promise<LagSample> => {
          const reply = JSON.parse((await send(`${bare!.info.url}/lag`)).body) as { p99_ms: number; max_ms: number; mean_ms: number };
          return { p99Ms: reply.p99_ms, maxMs: reply.max_ms, meanMs: reply.mean_ms };
        },
      },
    } as const;
    type Side = keyof typeof arms;

    // Idle reference: the loop's delay with no load at all.
    await Promise.all([arms.ours.lag(), arms.app.lag(), arms.bare.lag()]);
    await sleep(2000);
    const idle = { ours: await arms.ours.lag(), bare: await arms.bare.lag() };

    const sides: Side[] = ["ours", "app", "bare"];
    const runs: Record<Side, ArmRun[]> = { ours: [], app: [], bare: [] };
    for (let round = 0; round < rounds; round++) {
      const order = sides.map((_, i) => sides[(i + round) % sides.length]!);
      for (const side of order) {
        const arm = arms[side];
        await runWrk(arm.url, warmup, connections, wrkThreads, wrkEnv);
        const fallbacksBefore = side === "ours" ? await fallbackCount(arm.url) : 0;
        const cpu0 = readCpuSeconds(arm.pid);
        const { value: summary, lag } = await lagDuring(arm.lag, () => runWrk(arm.url, seconds, connections, wrkThreads, wrkEnv));
        const cpuSeconds = readCpuSeconds(arm.pid) - cpu0;
        const run: ArmRun = {
          requestsPerSec: summary.requests / (summary.duration_us / 1e6),
          p50Ms: summary.latency_us.p50 / 1000,
          p95Ms: summary.latency_us.p95 / 1000,
          p99Ms: summary.latency_us.p99 / 1000,
          errors: Object.values(summary.errors).reduce((a, b) => a + b, 0),
          cpuUsPerRequest: (cpuSeconds / summary.requests) * 1e6,
          lag,
        };
        if (side === "ours") run.extraFallbacks = (await fallbackCount(arm.url)) - fallbacksBefore - summary.unknown_sent;
        // The same question at a moderate, paced load, where a blocked loop would stand out.
        const paced = await lagDuring(arm.lag, () =>
          closedLoop({
            baseUrl: arm.url,
            concurrency: pacedClients,
            pauseMs: pacedPauseMs,
            warmupMs: 500,
            durationMs: (seconds / 2) * 1000,
            end: "drain",
            timeoutMs: 10_000,
            nextRequest: () => {
              const unknown = Math.random() < unknownShare;
              const id = unknown ? 900_000_000 + Math.floor(Math.random() * 1e6) : users[Math.floor(Math.random() * users.length)]!;
              return { method: "GET", path: `/recommend/${id}?k=${k}` };
            },
          }),
        );
        run.paced = {
          requestsPerSec: paced.value.completed / (paced.value.windowMs / 1000),
          p50Ms: percentile(paced.value.latenciesMs, 50),
          p99Ms: percentile(paced.value.latenciesMs, 99),
          errors: paced.value.errors,
          lag: paced.lag,
        };
        runs[side].push(run);
        console.log(
          `  round ${round + 1} ${side.padEnd(5)} ${fmt(run.requestsPerSec, 0).padStart(7)} req/s  p50 ${fmt(run.p50Ms, 2)} ms` +
            `  p99 ${fmt(run.p99Ms, 2)} ms  loop delay max ${fmt(Math.max(...lag.map((l) => l.maxMs)), 1)} ms` +
            `  | paced ${fmt(run.paced.requestsPerSec, 0)} req/s, loop max ${fmt(Math.max(...run.paced.lag.map((l) => l.maxMs)), 1)} ms` +
            (run.errors + run.paced.errors ? `  ${run.errors + run.paced.errors} errors` : ""),
        );
      }
    }
    const loadDuring = load.stop();

    const throughput = spread(runs.ours.map((r, i) => r.requestsPerSec / runs.bare[i]!.requestsPerSec));
    const layerShare = spread(runs.app.map((r, i) => r.requestsPerSec / runs.bare[i]!.requestsPerSec));
    const modelShare = spread(runs.ours.map((r, i) => r.requestsPerSec / runs.app[i]!.requestsPerSec));
    const lagOf = (side: Side, pick: (r: ArmRun) => LagSample[]) => ({
      p99Ms: median(runs[side].map((r) => Math.max(...pick(r).map((l) => l.p99Ms)))),
      maxMs: Math.max(...runs[side].flatMap((r) => pick(r).map((l) => l.maxMs))),
      meanMs: median(runs[side].flatMap((r) => pick(r).map((l) => l.meanMs))),
    });
    const lag = { ours: lagOf("ours", (r) => r.lag), app: lagOf("app", (r) => r.lag), bare: lagOf("bare", (r) => r.lag) };
    const pacedLag = {
      ours: lagOf("ours", (r) => r.paced!.lag),
      app: lagOf("app", (r) => r.paced!.lag),
      bare: lagOf("bare", (r) => r.paced!.lag),
    };

    console.log("\n" + table(
      ["arm (median of rounds)", "req/s", "CPU us/req", "p50 ms", "p95 ms", "p99 ms", "errors", "loop p99 ms", "loop max ms"],
      sides.map((side) => {
        const r = runs[side];
        const med = (f: (x: ArmRun) => number) => median(r.map(f));
        return [
          arms[side].label,
          fmt(med((x) => x.requestsPerSec), 0),
          fmt(med((x) => x.cpuUsPerRequest), 0),
          fmt(med((x) => x.p50Ms), 2),
          fmt(med((x) => x.p95Ms), 2),
          fmt(med((x) => x.p99Ms), 2),
          String(r.reduce((n, x) => n + x.errors, 0)),
          fmt(lag[side].p99Ms, 1),
          fmt(lag[side].maxMs, 1),
        ];
      }),
    ));
    console.log("  CPU us/req: CPU time of the server process, all its threads (the model's included), per answer");
    console.log(`  loop: event-loop delay sampled every 10 ms (monitorEventLoopDelay; an idle loop reads ~10 ms,` +
      ` here ours ${fmt(idle.ours.maxMs, 1)} / bare ${fmt(idle.bare.maxMs, 1)} ms max at idle); p99 = worst 2-s interval, median of rounds; max = worst of all`);
    console.log("\n" + table(
      [`paced load: ${pacedClients} clients, ${pacedPauseMs} ms pause`, "req/s", "p50 ms", "p99 ms", "errors", "loop p99 ms", "loop max ms"],
      sides.map((side) => {
        const r = runs[side].map((x) => x.paced!);
        return [
          arms[side].label,
          fmt(median(r.map((x) => x.requestsPerSec)), 0),
          fmt(median(r.map((x) => x.p50Ms)), 2),
          fmt(median(r.map((x) => x.p99Ms)), 2),
          String(r.reduce((n, x) => n + x.errors, 0)),
          fmt(pacedLag[side].p99Ms, 1),
          fmt(pacedLag[side].maxMs, 1),
        ];
      }),
    ));
    const extra = runs.ours.map((r) => r.extraFallbacks ?? 0);
    // "Never blocks": the app's loop delay stays at the bare route's level, saturated and paced.
    const near = (a: number, b: number) => a <= Math.max(2 * b, b + 10);
    const lagOk = near(lag.ours.maxMs, lag.bare.maxMs) && near(pacedLag.ours.maxMs, pacedLag.bare.maxMs);
    console.log("\n" + table(
      ["ratio", "median (min-max)", "target", ""],
      [
        ["req/s ours / bare Express", fmtSpread(throughput, 2, "x"), ">= 0.8x", verdict(throughput.median >= 0.8)],
        ["  of which: app+constant / bare (HTTP layer)", fmtSpread(layerShare, 2, "x"), "", ""],
        ["  of which: ours / app+constant (model call)", fmtSpread(modelShare, 2, "x"), "", ""],
        ["loop max delay ours / bare, saturated", fmt(lag.ours.maxMs / lag.bare.maxMs, 2) + "x", "~1x", verdict(near(lag.ours.maxMs, lag.bare.maxMs))],
        ["loop max delay ours / bare, paced", fmt(pacedLag.ours.maxMs / pacedLag.bare.maxMs, 2) + "x", "~1x", verdict(near(pacedLag.ours.maxMs, pacedLag.bare.maxMs))],
      ],
    ));
    console.log(`\nfallbacks beyond the unknown users (budget misses or overload) per round: ${extra.join(", ")}`);
    console.log(`load average (1 min) during the run: ${loadDuring.min.toFixed(2)}-${loadDuring.max.toFixed(2)}, mean ${loadDuring.mean}`);

    const file = writeResults("recommend-http", {
      benchmark: "recommend-http",
      date: new Date().toISOString(),
      machine,
      loadDuring,
      settings: { recsysCheckpoint, rounds, seconds, warmup, connections, wrkThreads, unknownShare, k, knownUsers: users.length },
      idleLag: idle,
      runs,
      throughputRatio: throughput,
      httpLayerRatio: layerShare,
      modelCallRatio: modelShare,
      lag,
      pacedLag,
      lagOk,
    });
    console.log(`results: ${file}`);
  } finally {
    load.stop();
    await Promise.all([ours?.stop(), bare?.stop(), constApp?.stop()]);
  }
}

/** Samples an arm's event-loop delay every 2 s while `load` runs, and once at its end. */
async function lagDuring<T>(probe: () => Promise<LagSample>, load: () => Promise<T>): Promise<{ value: T; lag: LagSample[] }> {
  await probe(); // resets the histogram
  const lag: LagSample[] = [];
  let probing = true;
  const prober = (async () => {
    while (probing) {
      await sleep(2000);
      if (probing) lag.push(await probe());
    }
  })();
  const value = await load();
  probing = false;
  await prober;
  lag.push(await probe());
  return { value, lag };
}

async function fallbackCount(url: string): Promise<number> {
  const metrics = await scrape(url);
  let total = 0;
  for (const [name, value] of metrics) if (name.startsWith("recommend_fallback_total")) total += value;
  return total;
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
