/**
 * Our server against a Python FastAPI + PyTorch service (scripts/bench/fastapi_server.py)
 * running the same checkpoint with the same batching rule, the same endpoint and the same
 * thread settings, under the same closed-loop load, alternating round by round.
 *
 *   node dist/scripts/bench/vs-fastapi.js [--ckpt models/brown-gpt.pt] [--quick]
 *
 * Two load levels: 64 clients (throughput, and latency with queueing) and 1 client (the
 * latency of a lone request). Targets (DESIGN.md section 6), at 64 clients: throughput
 * ours/theirs >= 2, median latency ours/theirs <= 0.5.
 */
import { parseFlags, numberFlag, stringFlag } from "./lib/args.js";
import { startFastapi, startOurServer, type OurServer } from "./lib/servers.js";
import { readCpuSeconds, type Child } from "./lib/child.js";
import { scrape } from "./lib/http.js";
import { calibrate, runHttpArm, waitIdle, type ArmRound, type Calibration } from "./lib/generation.js";
import { LoadSampler, machineFacts } from "./lib/machine.js";
import { textCheckpoint } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";
import { fmt, fmtSpread, median, spread, table, verdict } from "./lib/stats.js";

const USAGE = `usage: node dist/scripts/bench/vs-fastapi.js [options]
  --ckpt PATH          text checkpoint (default models/brown-gpt.pt)
  --rounds N           rounds, the order alternating (default 4; --quick 1)
  --seconds S          measured window at 64 clients (default 6; --quick 5)
  --lone-seconds S     measured window at 1 client (default 4; --quick 3; 0 skips it)
  --warmup S           least warm-up before each window (default 1.5); it also
                       lasts until every client has had an answer (steady-state latencies)
  --concurrency N      clients of the loaded level (default 64)
  --max-new-tokens N   tokens per request (default 64)
  --max-batch-size N   both servers' maxBatchSize (default 8)
  --max-wait-ms MS     both servers' maxWaitMs (default 5)
  --threads N          torch intra-op and OpenBLAS threads, both servers (default 2)
  --quick              one short round`;

type Side = "ours" | "fastapi";

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2), USAGE, [
    "ckpt", "rounds", "seconds", "lone-seconds", "warmup", "concurrency", "max-new-tokens", "max-batch-size", "max-wait-ms", "threads", "quick",
  ]);
  const quick = flags.has("quick");
  const checkpoint = textCheckpoint(flags.get("ckpt") === undefined ? undefined : stringFlag(flags, "ckpt", ""));
  const rounds = numberFlag(flags, "rounds", quick ? 1 : 4);
  const durationMs = numberFlag(flags, "seconds", quick ? 5 : 6) * 1000;
  const loneMs = numberFlag(flags, "lone-seconds", quick ? 3 : 4) * 1000;
  const warmupMs = numberFlag(flags, "warmup", 1.5) * 1000;
  const concurrency = numberFlag(flags, "concurrency", 64);
  const maxNewTokens = numberFlag(flags, "max-new-tokens", 64);
  const maxBatchSize = numberFlag(flags, "max-batch-size", 8);
  const maxWaitMs = numberFlag(flags, "max-wait-ms", 5);
  const threads = numberFlag(flags, "threads", 2);

  const machine = machineFacts();
  console.log(`vs-fastapi: ${checkpoint}`);
  console.log(`  ${machine.cpu}, ${machine.cores} cores, node ${machine.node}, load ${machine.loadAtStart.toFixed(2)}`);
  console.log(`  both: maxBatchSize ${maxBatchSize}, maxWaitMs ${maxWaitMs}, ${threads} torch + OpenBLAS threads, OMP_WAIT_POLICY=PASSIVE`);
  console.log(`  ${maxNewTokens} new tokens (greedy); ${rounds} round(s): ${concurrency} clients x ${durationMs / 1000} s` +
    (loneMs > 0 ? `, 1 client x ${loneMs / 1000} s` : ""));

  let ours: OurServer | undefined;
  let fastapi: Child<{ url: string }> | undefined;
  const load = new LoadSampler();
  try {
    [ours, fastapi] = await Promise.all([
      startOurServer({ checkpoint, maxBatchSize, maxWaitMs, threads }),
      startFastapi({ checkpoint, maxBatchSize, maxWaitMs, threads }),
    ]);
    console.log(`  our engine runtime: ${ours.info.runtime}`);
    const url: Record<Side, string> = { ours: ours.info.text, fastapi: fastapi.info.url };
    // Calibration doubles as a warm-up and as a check that both produce the same text.
    const calibration: Record<Side, Calibration> = {
      ours: await calibrate(url.ours, maxNewTokens),
      fastapi: await calibrate(url.fastapi, maxNewTokens),
    };
    const sameText = calibration.ours.texts.filter((t, i) => t === calibration.fastapi.texts[i]).length;
    const sameTokens = calibration.ours.tokens.filter((t, i) => t === calibration.fastapi.tokens[i]).length;
    console.log(`  same greedy continuation from both: ${sameText}/${calibration.ours.texts.length} prompts` +
      ` (token counts equal: ${sameTokens}/${calibration.ours.tokens.length})\n`);

    const levels = [{ name: "loaded", clients: concurrency, ms: durationMs }];
    if (loneMs > 0) levels.push({ name: "lone", clients: 1, ms: loneMs });
    const runs = new Map<string, ArmRound[]>();
    for (let round = 0; round < rounds; round++) {
      const order: Side[] = round % 2 === 0 ? ["ours", "fastapi"] : ["fastapi", "ours"];
      for (const level of levels) {
        for (const side of order) {
          const pid = side === "ours" ? ours.pid : fastapi.pid;
          const tokens0 = (await scrape(url[side])).get("generated_tokens_total") ?? Number.NaN;
          const cpu0 = readCpuSeconds(pid);
          const outcome = await runHttpArm({
            baseUrl: url[side],
            concurrency: level.clients,
            warmupMs,
            durationMs: level.ms,
            maxNewTokens,
            calibration: calibration[side],
            end: "abort",
          });
          await waitIdle(url[side], 300_000);
          const tokens1 = (await scrape(url[side])).get("generated_tokens_total") ?? Number.NaN;
          outcome.tokensPerCpuSec = (tokens1 - tokens0) / (readCpuSeconds(pid) - cpu0);
          const key = `${level.name}/${side}`;
          runs.set(key, [...(runs.get(key) ?? []), outcome]);
          const errors = outcome.errors ? `, ${outcome.errors} errors: ${outcome.errorSamples[0]}` : "";
          console.log(
            `  round ${round + 1} ${String(level.clients).padStart(2)} client(s) ${side.padEnd(7)} ${fmt(outcome.tokensPerSec, 0).padStart(7)} tok/s` +
              ` ${fmt(outcome.tokensPerCpuSec ?? Number.NaN, 0).padStart(6)} tok/CPU-s` +
              `  p50 ${fmt(outcome.p50Ms, 0).padStart(6)} ms  p95 ${fmt(outcome.p95Ms, 0).padStart(6)} ms  batch ${fmt(outcome.meanBatch, 1)}${errors}`,
          );
        }
      }
    }
    const loadDuring = load.stop();

    const get = (level: string, side: Side) => runs.get(`${level}/${side}`) ?? [];
    const ratioOf = (level: string, f: (r: ArmRound) => number) =>
      spread(get(level, "ours").map((r, i) => f(r) / f(get(level, "fastapi")[i]!)));
    const ratios = {
      throughput: ratioOf("loaded", (r) => r.tokensPerSec),
      cpuPerToken: ratioOf("loaded", (r) => 1 / (r.tokensPerCpuSec ?? Number.NaN)),
      medianLatency: ratioOf("loaded", (r) => r.p50Ms),
      p95Latency: ratioOf("loaded", (r) => r.p95Ms),
      loneMedianLatency: loneMs > 0 ? ratioOf("lone", (r) => r.p50Ms) : undefined,
    };

    console.log("\n" + table(
      ["server, load (median of rounds)", "tok/s", "tok/CPU-s", "req/s", "p50 ms", "p95 ms", "batch", "errors"],
      levels.flatMap((level) =>
        (["ours", "fastapi"] as Side[]).map((side) => {
          const r = get(level.name, side);
          const med = (f: (x: ArmRound) => number) => median(r.map(f));
          return [
            `${side === "ours" ? "ours (Express + addon)" : "FastAPI + PyTorch"}, ${level.clients} client(s)`,
            fmt(med((x) => x.tokensPerSec), 0),
            fmt(med((x) => x.tokensPerCpuSec ?? Number.NaN), 0),
            fmt(med((x) => x.requestsPerSec), 1),
            fmt(med((x) => x.p50Ms), 0),
            fmt(med((x) => x.p95Ms), 0),
            fmt(med((x) => x.meanBatch), 1),
            String(r.reduce((n, x) => n + x.errors, 0)),
          ];
        }),
      ),
    ));
    const rows = [
      ["throughput ours/FastAPI, 64 clients", fmtSpread(ratios.throughput, 2, "x"), ">= 2x", verdict(ratios.throughput.median >= 2)],
      ["median latency ours/FastAPI, 64 clients", fmtSpread(ratios.medianLatency, 2, "x"), "<= 0.5x", verdict(ratios.medianLatency.median <= 0.5)],
      ["p95 latency ours/FastAPI, 64 clients", fmtSpread(ratios.p95Latency, 2, "x"), "", ""],
      ["CPU-s per token ours/FastAPI, 64 clients", fmtSpread(ratios.cpuPerToken, 2, "x"), "", ""],
    ];
    if (ratios.loneMedianLatency) rows.push(["median latency ours/FastAPI, 1 client", fmtSpread(ratios.loneMedianLatency, 2, "x"), "", ""]);
    console.log("\n" + table(["ratio", "median (min-max)", "target", ""], rows));
    console.log(`\nload average (1 min) during the run: ${loadDuring.min.toFixed(2)}-${loadDuring.max.toFixed(2)}, mean ${loadDuring.mean}`);

    const file = writeResults("vs-fastapi", {
      benchmark: "vs-fastapi",
      date: new Date().toISOString(),
      machine,
      loadDuring,
      runtime: ours.info.runtime,
      settings: { checkpoint, rounds, durationMs, loneMs, warmupMs, concurrency, maxNewTokens, maxBatchSize, maxWaitMs, threads },
      sameText: `${sameText}/${calibration.ours.texts.length}`,
      calibration,
      runs: Object.fromEntries(runs),
      ratios,
    });
    console.log(`results: ${file}`);
  } finally {
    load.stop();
    await Promise.all([ours?.stop(), fastapi?.stop()]);
  }
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
