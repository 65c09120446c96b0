/**
 * What loading a checkpoint costs: resident memory after load against the weights it holds,
 * and load time against reading the file, for each checkpoint given (one per dtype, e.g. the
 * f32, bf16 and f16 files of one shape). Targets: resident <= 1.15x the weight bytes plus the
 * KV budget (SERVICE_KV_BUDGET_MB), load <= 2x reading the file.
 *
 *   node dist/scripts/bench/load-memory.js --ckpt A.pt[,B.pt...] [--runtime auto|native|torchscript]
 *        [--kv-budget-mb 256] [--threads N] [--tokens 8] [--cold] [--kernels avx2] [--layout-cache on|off]
 *        [--serve-during-write]
 *
 * Each checkpoint loads in a child process of its own (VmRSS and VmHWM are per process), one at
 * a time. The file is read once to warm the page cache and then timed on a second read (into a
 * reused buffer), so both the read and the load below find it cached: the ratio compares like
 * with like. With --cold, the checkpoint's pages are dropped from the page cache instead
 * (`dd iflag=nocache count=0`, this file only: libtorch and the addon stay cached) before the
 * timed read and before each load, so both read it from the disk, as a server's first start
 * after a reboot or a fresh download does. Load time is TorchEngine.load: archive, runtime
 * choice with its load-time check, packing and warm-up. After load, a short greedy generation proves the model still serves.
 * Each checkpoint loads twice, with a fresh directory for remembered verdicts of the load-time
 * check (loadCheckCache): the first load checks and remembers, the second finds the verdict
 * (a build that does not remember verdicts checks both times). The same fresh directory keeps
 * layout files (layoutCache, docs/operations.md "Layout files"; --layout-cache off: none): the
 * first load's child waits for its background write to end before it exits (the seconds it took
 * are printed apart, not counted in the load), and the later load maps the file, which is read
 * once before it to warm the page cache as the checkpoint is (with --cold, dropped from it).
 * With --serve-during-write the first load's child serves greedy requests of --tokens tokens one
 * after another while the file is written (the rows as they lie in the checkpoint), then three
 * more after it (the first of which takes the file's runs), and prints their seconds side by side.
 * Weight bytes are the tensor bytes stored in the archive (its data/ entries). Results go to
 * .cache/bench/load-memory-latest.json.
 */
import { execFileSync, fork } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readSync, readFileSync, rmSync, statSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import type { KernelFamilyCap } from "../../src/native/types.js";
import { numberFlag, parseFlags, stringFlag } from "./lib/args.js";
import { storedTensorBytes } from "./lib/bandwidth.js";
import { machineFacts } from "./lib/machine.js";
import { writeResults } from "./lib/results.js";

const usage = `usage: node dist/scripts/bench/load-memory.js --ckpt A.pt[,B.pt...] [options]
  --ckpt LIST          checkpoints, comma-separated (e.g. one per dtype)
  --runtime NAME       auto (default), native or torchscript
  --kv-budget-mb N     KV budget (default 256, the engine's)
  --threads N          compute threads (default cores - 1)
  --tokens N           greedy tokens generated after load (default 8)
  --kernels NAME       native kernel family cap (default auto; SERVICE_KERNELS's values)
  --cold               drop the checkpoint from the page cache before the read and each load
  --layout-cache on|off  keep layout files in the run's fresh cache directory (default on)
  --serve-during-write   time requests during the first load's layout write and after it`;

interface ChildReport {
  baselineRssBytes: number;
  loadSeconds: number;
  rssBytes: number;
  hwmBytes: number;
  runtime: string;
  kernels?: string;
  moduleBytes?: number;
  runtimeBytes?: number;
  generated: number;
  /** Seconds of each step of TorchEngine.load (engine.loadPhases); absent from older builds. */
  phases?: Record<string, number>;
  /** The layout file this load wrote: its bytes, and seconds from the end of the load to the end of the write. */
  layoutWrite?: { file: string; bytes: number; seconds: number; error: string };
  /** Whether this load mapped a layout file (its runtime note says so). */
  layoutMapped?: boolean;
  /** --serve-during-write: seconds of each request while the layout file was written, and after. */
  servedDuring?: number[];
  servedAfter?: number[];
  /** --serve-during-write: resident bytes after those requests (the file's runs taken), and the peak since the process began. */
  rssAfterServed?: number;
  hwmAfterServed?: number;
}

interface Row extends ChildReport {
  /** The second load, which finds the first one's remembered verdict. */
  later: ChildReport;
  laterLoadRatio: number;
  /**
   * The later load less its first step (loading the addon, which a process does once whatever it
   * loads: 0.45-0.7 s for the libtorch addon, all of it in the dynamic loader and libtorch's static
   * initialisers; milliseconds for the build without libtorch, which serves later loads where it
   * is built), against the read; undefined where the build reports no phases.
   */
  laterOwnRatio: number | undefined;
  checkpoint: string;
  dtype: string;
  fileBytes: number;
  weightBytes: number;
  readSeconds: number;
  kvBudgetBytes: number;
  /** resident / (1.15 x weights + KV budget): <= 1 meets the target. */
  memoryRatio: number;
  /** load / read: <= 2 meets the target. */
  loadRatio: number;
}

function status(): { rss: number; hwm: number } {
  const text = readFileSync("/proc/self/status", "utf8");
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN) * 1024;
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

async function child(path: string, runtime: string, kvBudgetMb: number, threads: number, tokens: number, cache: string, kernels: string, layouts: string, serveDuringWrite: boolean): Promise<void> {
  const baseline = status().rss;
  const start = performance.now();
  const engine = await TorchEngine.load(path, {
    runtime: runtime as "auto" | "native" | "torchscript",
    kvBudgetMb,
    threads,
    loadCheckCache: cache,
    kernels: kernels as KernelFamilyCap,
    ...(layouts === "off" ? {} : { layoutCache: join(cache, "layouts") }),
  });
  const loadSeconds = (performance.now() - start) / 1000;
  const loaded = performance.now();
  const after = status();
  let memory: { moduleBytes: number; runtimeBytes: number } | undefined;
  try {
    memory = await engine.weightMemory();
  } catch {
    // an addon without the query (an older build): the RSS figures still stand
  }
  const [text] = await engine.generateBatch([{ prompt: "The weights", maxNewTokens: tokens, temperature: 0, topK: null }]);
  const report: ChildReport = {
    baselineRssBytes: baseline,
    loadSeconds,
    rssBytes: after.rss,
    hwmBytes: after.hwm,
    runtime: engine.runtime,
    ...(engine.kernels ? { kernels: engine.kernels } : {}),
    ...(memory ?? {}),
    generated: [...(text ?? "")].length,
    ...(engine.loadPhases ? { phases: { ...engine.loadPhases } } : {}),
    layoutMapped: (engine.runtimeNote ?? "").includes("mapped from"),
  };
  // The write runs beside serving; the later load needs it whole. (An older build has no such call.)
  let pending: Promise<Awaited<ReturnType<TorchEngine["layoutWritten"]>>> = Promise.resolve(null);
  try {
    pending = engine.layoutWritten();
  } catch {
    // an addon without the call (an older build, run through TORCHSERVE_ADDON)
  }
  let ended = false;
  const writing = pending.finally(() => (ended = true));
  const timed = async (): Promise<number> => {
    const begin = performance.now();
    await engine.generateBatch([{ prompt: "The weights", maxNewTokens: tokens, temperature: 0, topK: null }]);
    return (performance.now() - begin) / 1000;
  };
  if (serveDuringWrite) {
    report.servedDuring = [];
    while (!ended) report.servedDuring.push(await timed());
  }
  const written = await writing;
  if (written) report.layoutWrite = { file: written.file, bytes: written.bytes, seconds: (performance.now() - loaded) / 1000, error: written.error };
  if (serveDuringWrite) {
    report.servedAfter = [];
    for (let i = 0; i < 3; ++i) report.servedAfter.push(await timed());
    const served = status();
    report.rssAfterServed = served.rss;
    report.hwmAfterServed = served.hwm;
  }
  await engine.dispose();
  process.send!(report);
}

function configDtype(path: string): string {
  const code =
    "import json, sys, zipfile\n" +
    "z = zipfile.ZipFile(sys.argv[1])\n" +
    "name = next(n for n in z.namelist() if n.endswith('/extra/config.json'))\n" +
    "print(json.loads(z.read(name)).get('dtype', 'float32'))";
  return execFileSync("/usr/bin/python3", ["-c", code, path], { encoding: "utf8" }).trim();
}

/** Seconds to read the whole file through a reused 64 MiB buffer. */
function readSeconds(path: string): number {
  const buffer = Buffer.allocUnsafe(64 << 20);
  const fd = openSync(path, "r");
  const start = performance.now();
  try {
    while (readSync(fd, buffer, 0, buffer.length, null) > 0) {
      // the bytes themselves are not needed
    }
  } finally {
    closeSync(fd);
  }
  return (performance.now() - start) / 1000;
}

/** Drops the file's pages from the page cache (GNU dd's documented idiom; no root needed). */
function evict(path: string): void {
  execFileSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
}

function runChild(path: string, args: string[], cold: boolean): Promise<ChildReport> {
  if (cold) evict(path);
  return new Promise((resolve, reject) => {
    const proc = fork(fileURLToPath(import.meta.url), ["--child", path, ...args], {
      env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" },
    });
    let report: ChildReport | undefined;
    proc.on("message", (message) => (report = message as ChildReport));
    proc.on("error", reject);
    proc.on("exit", (code) => (report ? resolve(report) : reject(new Error(`the load of ${path} exited with ${code}`))));
  });
}

const gb = (bytes: number) => (bytes / 1e9).toFixed(2);

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === "--child") {
    const [, path, runtime, kv, threads, tokens, cache, kernels, layouts, serve] = argv;
    await child(path!, runtime!, Number(kv), Number(threads), Number(tokens), cache!, kernels ?? "auto", layouts ?? "on", serve === "serve");
    return;
  }
  const flags = parseFlags(argv, usage, ["ckpt", "runtime", "kv-budget-mb", "threads", "tokens", "cold", "kernels", "layout-cache", "serve-during-write"]);
  const cold = flags.get("cold") === true;
  const list = stringFlag(flags, "ckpt", "");
  if (!list) {
    console.error(`--ckpt is required\n\n${usage}`);
    process.exit(2);
  }
  const runtime = stringFlag(flags, "runtime", "auto");
  const kvBudgetMb = numberFlag(flags, "kv-budget-mb", 256);
  const threads = numberFlag(flags, "threads", Math.max(1, availableParallelism() - 1));
  const tokens = numberFlag(flags, "tokens", 8);
  const kernels = stringFlag(flags, "kernels", "auto");
  const layouts = stringFlag(flags, "layout-cache", "on");
  const serveDuringWrite = flags.get("serve-during-write") === true;
  const rows: Row[] = [];
  for (const checkpoint of list.split(",")) {
    const fileBytes = statSync(checkpoint).size;
    const weightBytes = storedTensorBytes(checkpoint);
    if (cold) evict(checkpoint);
    else readSeconds(checkpoint); // warms the page cache
    const read = readSeconds(checkpoint);
    const cache = mkdtempSync(join(tmpdir(), "load-checks-"));
    const args = [runtime, String(kvBudgetMb), String(threads), String(tokens), cache, kernels, layouts];
    const report = await runChild(checkpoint, serveDuringWrite ? [...args, "serve"] : args, cold);
    // The layout file the later load maps is treated as the checkpoint is: read through once so
    // that the load finds it cached (a host whose memory holds less than the checkpoint, the
    // layout file and the first load's weights at once, as this 24 GB one at 8B Q8_0, drops
    // part of it while it is written), or dropped with --cold.
    const layout = report.layoutWrite && !report.layoutWrite.error ? report.layoutWrite.file : undefined;
    if (layout) {
      if (cold) evict(layout);
      else readSeconds(layout);
    }
    const later = await runChild(checkpoint, args, cold);
    rmSync(cache, { recursive: true, force: true });
    const kvBudgetBytes = kvBudgetMb * 2 ** 20;
    rows.push({
      checkpoint,
      dtype: configDtype(checkpoint),
      fileBytes,
      weightBytes,
      readSeconds: read,
      kvBudgetBytes,
      ...report,
      memoryRatio: report.rssBytes / (1.15 * weightBytes + kvBudgetBytes),
      loadRatio: report.loadSeconds / read,
      later,
      laterLoadRatio: later.loadSeconds / read,
      laterOwnRatio:
        later.phases?.["checksum and addon"] === undefined ? undefined : (later.loadSeconds - later.phases["checksum and addon"]) / read,
    });
  }

  console.log(
    `runtime ${runtime}, KV budget ${kvBudgetMb} MiB, ${threads} threads; GB = 1e9 bytes; ` +
      (cold ? "cold: the checkpoint dropped from the page cache before the read and before each load" : "cached: the read and the loads find the checkpoint in the page cache"),
  );
  console.log(
    "checkpoint                    dtype     weights  module  runtime  RSS before  RSS after  HWM     x weights  target  " +
      "read s  load s  load/read  later s  later/read  later w/o addon /read",
  );
  for (const row of rows) {
    const cells = [
      basename(row.checkpoint).padEnd(29),
      row.dtype.padEnd(9),
      gb(row.weightBytes).padStart(7),
      (row.moduleBytes === undefined ? "n/a" : gb(row.moduleBytes)).padStart(6),
      (row.runtimeBytes === undefined ? "n/a" : gb(row.runtimeBytes)).padStart(7),
      gb(row.baselineRssBytes).padStart(10),
      gb(row.rssBytes).padStart(9),
      gb(row.hwmBytes).padStart(6),
      (row.rssBytes / row.weightBytes).toFixed(2).padStart(9),
      `${row.memoryRatio.toFixed(2)}${row.memoryRatio <= 1 ? " ok" : " MISS"}`.padStart(7),
      row.readSeconds.toFixed(2).padStart(6),
      row.loadSeconds.toFixed(2).padStart(6),
      `${row.loadRatio.toFixed(2)}${row.loadRatio <= 2 ? " ok" : " MISS"}`.padStart(9),
      row.later.loadSeconds.toFixed(2).padStart(7),
      `${row.laterLoadRatio.toFixed(2)}${row.laterLoadRatio <= 2 ? " ok" : " MISS"}`.padStart(10),
      (row.laterOwnRatio === undefined ? "n/a" : `${row.laterOwnRatio.toFixed(2)}${row.laterOwnRatio <= 2 ? " ok" : " MISS"}`).padStart(26),
    ];
    console.log(`${cells.join("  ")}   ${row.runtime}${row.kernels ? ` (${row.kernels})` : ""}`);
  }
  console.log("target: RSS after <= 1.15 x weights + KV budget (ratio <= 1), load <= 2 x read");
  console.log(
    "later w/o addon: the later load less loading the addon (once per process, whatever it loads; libtorch's 0.45-0.7 s where " +
      "the libtorch addon serves it, TORCHSERVE_NATIVE_ADDON=off)",
  );
  console.log("\nwhere the load's seconds go (TorchEngine.loadPhases):");
  for (const row of rows) {
    for (const [which, report] of [["first", row], ["later", row.later]] as const) {
      const steps = Object.entries(report.phases ?? {}).filter(([name]) => name !== "total");
      const text = steps.length ? steps.map(([name, s]) => `${name} ${s.toFixed(2)}`).join(", ") : "(not reported by this build)";
      const write = report.layoutWrite;
      const layout = write
        ? `; layout file ${gb(write.bytes)} GB ${write.error ? `not written (${write.error})` : `written ${write.seconds.toFixed(2)} s after the load`}`
        : report.layoutMapped
          ? "; layout file mapped"
          : "";
      console.log(`  ${basename(row.checkpoint)} ${which}: ${text}${layout}`);
    }
  }
  const span = (seconds: number[]) =>
    seconds.length ? `${Math.min(...seconds).toFixed(2)}-${Math.max(...seconds).toFixed(2)} s (${seconds.length})` : "none";
  for (const row of rows.filter((r) => r.servedDuring && r.servedAfter)) {
    console.log(
      `  ${basename(row.checkpoint)}: ${tokens}-token greedy requests in turn while the layout file was written ` +
        `(the rows as they lie) ${span(row.servedDuring!)}; after it (the first one takes the file's runs) ${span(row.servedAfter!)}; ` +
        `RSS then ${gb(row.rssAfterServed ?? NaN)} GB (${((row.rssAfterServed ?? NaN) / (1.15 * row.weightBytes + row.kvBudgetBytes)).toFixed(2)} of the target), ` +
        `peak ${gb(row.hwmAfterServed ?? NaN)} GB`,
    );
  }
  const file = writeResults("load-memory", { machine: machineFacts(), runtime, kvBudgetMb, threads, cold, rows });
  console.log(`results: ${file}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
