/**
 * POST /generate under a closed loop of 64 clients: the batching server against the same
 * server with batching off, and against the engine alone on the same batch shapes.
 *
 *   node dist/scripts/bench/generate-http.js [--ckpt models/brown-gpt.pt] [--quick]
 *
 * Arms, alternated round by round (the order rotates) so that the machine's background load
 * falls on all of them:
 *   (a) the server (`npm start` entry, child process), maxBatchSize 8, maxWaitMs 5
 *   (b) the same, maxBatchSize 1
 *   (c) the engine alone (TorchEngine.generateBatch back to back, child process, no HTTP), batch 8
 *   (d) the server with maxBatchSize 32
 *   (e) the engine alone, batch 32
 *   (f) the engine alone, batch 1 (c/f is the most batching can give: a/b's ceiling)
 * Targets (DESIGN.md section 6): a/b >= 4, a/c >= 0.95 (HTTP + batching within 5%).
 */
import { parseFlags, numberFlag, stringFlag } from "./lib/args.js";
import { defaultThreads } from "../../src/engine/TorchEngine.js";
import { readCpuSeconds } from "./lib/child.js";
import { scrape } from "./lib/http.js";
import { EngineDriver, startOurServer, type OurServer } from "./lib/servers.js";
import { burstRate, calibrate, runHttpArm, waitIdle, type ArmRound } from "./lib/generation.js";
import { LoadSampler, machineFacts } from "./lib/machine.js";
import { textCheckpoint } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { fmt, fmtSpread, median, percentile, spread, table, verdict, type Spread } from "./lib/stats.js";

const USAGE = `usage: node dist/scripts/bench/generate-http.js [options]
  --ckpt PATH          text checkpoint (default models/brown-gpt.pt)
  --rounds N           rounds of all arms (default 4; --quick 1)
  --seconds S          measured window per arm (default 5)
  --warmup S           least warm-up per arm (default 1.5); HTTP arms also warm
                       up until every client has had an answer (steady-state latencies)
  --concurrency N      closed-loop clients (default 64)
  --max-new-tokens N   tokens per request (default 64)
  --max-wait-ms MS     the servers' maxWaitMs (default 5)
  --threads N          compute threads of the engine, server and engine alone alike
                       (default: the server's own default, cores minus one, at most 8)
  --no-32              skip the batch-32 arms (d, e)
  --quick              one short round (~1 min)`;

interface Arm {
  id: string;
  label: string;
  kind: "http" | "engine";
  batch: number;
}

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2), USAGE, [
    "ckpt", "rounds", "seconds", "warmup", "concurrency", "max-new-tokens", "max-wait-ms", "threads", "no-32", "quick",
  ]);
  const quick = flags.has("quick");
  const checkpoint = textCheckpoint(flags.get("ckpt") === undefined ? undefined : stringFlag(flags, "ckpt", ""));
  const rounds = numberFlag(flags, "rounds", quick ? 1 : 4);
  const durationMs = numberFlag(flags, "seconds", quick ? 5 : 5) * 1000;
  const warmupMs = numberFlag(flags, "warmup", 1.5) * 1000;
  const concurrency = numberFlag(flags, "concurrency", 64);
  const maxNewTokens = numberFlag(flags, "max-new-tokens", 64);
  const maxWaitMs = numberFlag(flags, "max-wait-ms", 5);
  const threads = numberFlag(flags, "threads", defaultThreads());
  const with32 = !flags.has("no-32");

  const machine = machineFacts();
  console.log(`generate-http: ${checkpoint}`);
  console.log(`  ${machine.cpu}, ${machine.cores} cores, node ${machine.node}, load ${machine.loadAtStart.toFixed(2)}`);
  console.log(`  ${concurrency} clients, ${maxNewTokens} new tokens (greedy), ${threads} compute thread(s), ${rounds} round(s) x ${durationMs / 1000} s per arm`);

  const arms: Arm[] = [
    { id: "a", label: `(a) HTTP, maxBatchSize 8, wait ${maxWaitMs} ms`, kind: "http", batch: 8 },
    { id: "b", label: "(b) HTTP, maxBatchSize 1", kind: "http", batch: 1 },
    { id: "c", label: "(c) engine alone, batch 8", kind: "engine", batch: 8 },
    { id: "f", label: "(f) engine alone, batch 1", kind: "engine", batch: 1 },
  ];
  if (with32) {
    arms.push({ id: "d", label: "(d) HTTP, maxBatchSize 32", kind: "http", batch: 32 });
    arms.push({ id: "e", label: "(e) engine alone, batch 32", kind: "engine", batch: 32 });
  }

  const servers = new Map<number, OurServer>();
  let driver: EngineDriver | undefined;
  const load = new LoadSampler();
  try {
    const batches = [...new Set(arms.filter((a) => a.kind === "http").map((a) => a.batch))];
    const started = await Promise.all([
      ...batches.map((batch) => startOurServer({ checkpoint, maxBatchSize: batch, maxWaitMs, threads }, `server b=${batch}`)),
      EngineDriver.start(checkpoint, threads),
    ]);
    batches.forEach((batch, i) => servers.set(batch, started[i] as OurServer));
    driver = started[started.length - 1] as EngineDriver;

    const runtime = servers.get(8)!.info.runtime;
    console.log(`  engine runtime: server ${runtime}, engine driver ${driver.runtime}`);
    const calibration = await calibrate(servers.get(8)!.info.text, maxNewTokens);
    const tokensPerRequest = calibration.tokens.reduce((a, b) => a + b, 0) / calibration.tokens.length;
    console.log(`  calibrated: ${fmt(tokensPerRequest, 1)} tokens per request on average (eos may end one early)\n`);

    const perArm = new Map<string, ArmRound[]>(arms.map((a) => [a.id, []]));
    for (let round = 0; round < rounds; round++) {
      const order = arms.map((_, i) => arms[(i + round) % arms.length]!);
      for (const arm of order) {
        let outcome: ArmRound;
        if (arm.kind === "http") {
          const server = servers.get(arm.batch)!;
          const tokens0 = (await scrape(server.info.text)).get("generated_tokens_total") ?? Number.NaN;
          const cpu0 = readCpuSeconds(server.pid);
          outcome = await runHttpArm({
            baseUrl: server.info.text,
            concurrency,
            warmupMs,
            durationMs,
            maxNewTokens,
            calibration,
            end: "abort",
          });
          await waitIdle(server.info.text);
          const tokens1 = (await scrape(server.info.text)).get("generated_tokens_total") ?? Number.NaN;
          outcome.tokensPerCpuSec = (tokens1 - tokens0) / (readCpuSeconds(server.pid) - cpu0);
        } else {
          const cpu0 = readCpuSeconds(driver.pid);
          const run = await driver.run({ batchSize: arm.batch, maxNewTokens, warmupMs, durationMs });
          const cpuSeconds = readCpuSeconds(driver.pid) - cpu0;
          const ms = run.batches.map((b) => b.ms);
          outcome = {
            tokensPerSec: burstRate(run.batches),
            tokensPerSecWindow: run.tokens / (run.windowMs / 1000),
            requestsPerSec: run.requests / (run.windowMs / 1000),
            p50Ms: percentile(ms, 50),
            p95Ms: percentile(ms, 95),
            completed: run.requests,
            errors: 0,
            errorSamples: [],
            meanBatch: arm.batch,
            textMismatches: 0,
            warmupMs,
            tokensPerCpuSec: run.totalTokens / cpuSeconds,
          };
        }
        perArm.get(arm.id)!.push(outcome);
        const errors = outcome.errors ? `, ${outcome.errors} errors: ${outcome.errorSamples[0]}` : "";
        console.log(
          `  round ${round + 1} ${arm.label.padEnd(36)} ${fmt(outcome.tokensPerSec, 0).padStart(7)} tok/s` +
            `  ${fmt(outcome.tokensPerCpuSec ?? Number.NaN, 0).padStart(6)} tok/CPU-s  p50 ${fmt(outcome.p50Ms, 0).padStart(6)} ms  batch ${fmt(outcome.meanBatch, 1)}  warm-up ${fmt(outcome.warmupMs / 1000, 1)} s${errors}`,
        );
      }
    }
    const loadDuring = load.stop();

    const tps = (id: string) => perArm.get(id)?.map((r) => r.tokensPerSec) ?? [];
    const ratio = (x: string, y: string): Spread => spread(tps(x).map((v, i) => v / tps(y)[i]!));
    const cpuOf = (id: string) => perArm.get(id)?.map((r) => r.tokensPerCpuSec ?? Number.NaN) ?? [];
    const cpuRatio = (x: string, y: string): Spread => spread(cpuOf(x).map((v, i) => v / cpuOf(y)[i]!));
    const ratios: Record<string, { value: Spread; target?: string; ok?: boolean }> = {
      "a/b  batching on vs off": { value: ratio("a", "b"), target: ">= 4x" },
      "c/f  the engine's own batch 8 vs 1 (a/b's ceiling)": { value: ratio("c", "f") },
      "a/c  HTTP vs engine alone, batch 8": { value: ratio("a", "c"), target: ">= 0.95" },
      "b/f  HTTP vs engine alone, batch 1": { value: ratio("b", "f") },
    };
    ratios["a/b  batching on vs off"]!.ok = ratios["a/b  batching on vs off"]!.value.median >= 4;
    ratios["a/c  HTTP vs engine alone, batch 8"]!.ok = ratios["a/c  HTTP vs engine alone, batch 8"]!.value.median >= 0.95;
    if (with32) {
      ratios["d/e  HTTP vs engine alone, batch 32"] = { value: ratio("d", "e"), target: "(>= 0.95)" };
      ratios["d/e  HTTP vs engine alone, batch 32"]!.ok = ratios["d/e  HTTP vs engine alone, batch 32"]!.value.median >= 0.95;
      ratios["d/a  maxBatchSize 32 vs 8"] = { value: ratio("d", "a") };
    }

    console.log("\n" + table(
      ["arm (median of rounds)", "tok/s", "tok/CPU-s", "req/s", "p50 ms", "p95 ms", "batch", "errors"],
      arms.map((arm) => {
        const runs = perArm.get(arm.id)!;
        const med = (f: (r: ArmRound) => number) => median(runs.map(f));
        return [
          arm.label + (arm.kind === "engine" ? " *" : ""),
          fmt(med((r) => r.tokensPerSec), 0),
          fmt(med((r) => r.tokensPerCpuSec ?? Number.NaN), 0),
          fmt(med((r) => r.requestsPerSec), 1),
          fmt(med((r) => r.p50Ms), 0),
          fmt(med((r) => r.p95Ms), 0),
          fmt(med((r) => r.meanBatch), 1),
          String(runs.reduce((n, r) => n + r.errors, 0)),
        ];
      }),
    ));
    console.log("  * engine alone: p50/p95 are of one batch's duration (there is no request queue)");
    console.log("  tok/CPU-s: tokens per CPU-second of the serving process (all its threads) over the whole arm");
    console.log("\n" + table(
      ["ratio of tok/s", "median (min-max)", "target", ""],
      Object.entries(ratios).map(([name, r]) => [name, fmtSpread(r.value, 2, "x"), r.target ?? "", r.target ? verdict(r.ok) : ""]),
    ));
    const cpuRatios: Record<string, Spread> = {
      "a/c  HTTP vs engine alone, batch 8": cpuRatio("a", "c"),
      "b/f  HTTP vs engine alone, batch 1": cpuRatio("b", "f"),
    };
    if (with32) cpuRatios["d/e  HTTP vs engine alone, batch 32"] = cpuRatio("d", "e");
    console.log("\n" + table(
      ["ratio of tok/CPU-s (cost per token)", "median (min-max)"],
      Object.entries(cpuRatios).map(([name, r]) => [name, fmtSpread(r, 2, "x")]),
    ));
    const mismatches = [...perArm.values()].flat().reduce((n, r) => n + r.textMismatches, 0);
    console.log(`\nload average (1 min) during the run: ${loadDuring.min.toFixed(2)}-${loadDuring.max.toFixed(2)}, mean ${loadDuring.mean}` +
      `; answers differing from the calibrated greedy text: ${mismatches}`);

    const file = writeResults("generate-http", {
      benchmark: "generate-http",
      date: new Date().toISOString(),
      machine,
      loadDuring,
      runtime,
      settings: { checkpoint, rounds, durationMs, warmupMs, concurrency, maxNewTokens, maxWaitMs, threads },
      calibration,
      arms: arms.map((arm) => ({ ...arm, rounds: perArm.get(arm.id) })),
      ratios,
      cpuRatios,
    });
    console.log(`results: ${file}`);
  } finally {
    load.stop();
    await Promise.all([...servers.values()].map((s) => s.stop()));
    await driver?.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
