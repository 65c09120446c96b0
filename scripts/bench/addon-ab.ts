/**
 * Two or more builds of the addon on one checkpoint, alternating round by round, each in a
 * fresh process (TORCHSERVE_ADDON), so a shared, noisy machine slows them alike: the native
 * runtime's decode rate at one batch size, with the streaming-read bandwidth measured before
 * and after (the fraction of it a batch-1 step uses is what the bandwidth targets count).
 *
 *   node dist/scripts/bench/addon-ab.js --addons OLD.node,NEW.node --ckpt M.pt [--kernels avx2]
 *   node dist/scripts/bench/addon-ab.js --addons A.node,A.node --kernels avx512_bf16,amx --ckpt M.pt   (two families, one build)
 *        [--threads 2] [--batch 1] [--tokens 32] [--reps 5] [--rounds 3] [--prompt 16]
 *   node dist/scripts/bench/addon-ab.js --addons OLD.node,NEW.node --ckpt M.pt --prefill 512 --threads 2
 *        (prefill instead: prompt tokens a second)
 *   node dist/scripts/bench/addon-ab.js --addons A.node,A.node --vendors intel,amd --ckpt M.pt   (the two vendors' kernel variants)
 *   node dist/scripts/bench/addon-ab.js --addons A.node,A.node --bf16-weights packed,in-place --ckpt M-bf16.pt
 *        (a bf16 checkpoint's matrices packed against read where they lie)
 *
 * Each process loads the checkpoint (native runtime, the kernels named) and `reps` times
 * prefills `prompt` tokens a row and decodes 4 + tokens greedy tokens a row with
 * end-of-sequence off; a timing is the span of the streamed steps after the fourth, so the
 * prefill (and its noise, which a long prompt makes large) stays out of it. It reports the
 * best step rate; the table prints every round and each build against the first. The
 * bandwidth share counts the weights alone: after a long prompt a step also reads the KV cache.
 * With --prefill N a timing is instead one call that prefills an N-token prompt a row and
 * yields one token (nothing cached between calls: the prefix cache is off), reported as prompt
 * tokens a second.
 */
import { fork } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

import type { KernelFamily } from "../../src/native/types.js";
import { numberFlag, parseFlags, stringFlag } from "./lib/args.js";
import { readBandwidth, streamedWeightBytes } from "./lib/bandwidth.js";
import { machineFacts } from "./lib/machine.js";
import { loadNativeForTiming } from "./lib/nativeModel.js";

const usage = `usage: node dist/scripts/bench/addon-ab.js --addons A.node,B.node --ckpt M.pt [options]
  --addons LIST   addon builds (.node files), comma-separated; the first is the baseline
  --ckpt PATH     checkpoint
  --kernels NAME  native kernel family (default avx2), or one per addon, comma-separated
  --threads N     compute threads (default 1)
  --batch N       decode rows (default 1)
  --tokens N      tokens timed per row (default 32)
  --reps N        timings per process, the best kept (default 5)
  --rounds N      rounds, each build once per round (default 3)
  --prompt N      prompt tokens a row (default 16)
  --prefill N     time the prefill of an N-token prompt a row instead of decode
  --vendors LIST  SERVICE_CPU_VENDOR for each addon, comma-separated (intel, amd or auto)
  --bf16-weights LIST  SERVICE_BF16_WEIGHTS for each addon, comma-separated (in-place, packed or auto)`;

const flags = parseFlags(process.argv.slice(2), usage, ["addons", "ckpt", "kernels", "threads", "batch", "tokens", "reps", "rounds", "prompt", "prefill", "vendors", "bf16-weights", "child"]);
const ckpt = stringFlag(flags, "ckpt", "");
const kernelList = stringFlag(flags, "kernels", "avx2").split(",") as KernelFamily[];
const kernels = kernelList[0]!;
const threads = numberFlag(flags, "threads", 1);
const batch = numberFlag(flags, "batch", 1);
const tokens = numberFlag(flags, "tokens", 32);
const reps = numberFlag(flags, "reps", 5);
const prompt = numberFlag(flags, "prompt", 16);
const prefill = numberFlag(flags, "prefill", 0);

interface Report {
  tokensPerSecond: number;
  config: Record<string, unknown>;
}

async function child(): Promise<Report> {
  const { model, config } = await loadNativeForTiming(ckpt, threads, kernels);
  try {
    const vocabulary = Number(config.vocab_size);  // the demo model's is 259
    // Seconds from the end of the 4th step to the end of the last (steps 5 .. 4 + n).
    const warmSteps = 4;
    const run = async (n: number): Promise<number> => {
      const rows = Array.from({ length: batch }, (_, r) => ({
        tokens: Int32Array.from({ length: prompt }, (_, i) => (300 + ((i * 7 + r) % 200)) % vocabulary),
        maxNewTokens: warmSteps + n,
        sampling: { temperature: 0, topK: 0, seed: -1 },
      }));
      // The time each row's j-th token arrived; a step's time is its last row's.
      const arrivals = Array.from({ length: batch }, () => [] as number[]);
      await model.generate(rows, (pairs) => {
        const now = performance.now();
        for (let i = 0; i < pairs.length; i += 2) arrivals[pairs[i]!]!.push(now);
      }).result;
      const stepEnd = (j: number) => Math.max(...arrivals.map((times) => times[j] ?? NaN));
      const seconds = (stepEnd(warmSteps + n - 1) - stepEnd(warmSteps - 1)) / 1000;
      if (!(seconds > 0)) throw new Error(`a timing of ${n} steps read ${seconds} s: tokens did not all stream`);
      return seconds;
    };
    const prefillOnce = async (): Promise<number> => {
      const rows = Array.from({ length: batch }, (_, r) => ({
        tokens: Int32Array.from({ length: prefill }, (_, i) => (300 + ((i * 7919 + r) % 30000)) % vocabulary),
        maxNewTokens: 1,
        sampling: { temperature: 0, topK: 0, seed: -1 },
      }));
      const start = performance.now();
      await model.generate(rows, null).result;
      return (performance.now() - start) / 1000;
    };
    if (prefill > 0) await prefillOnce();
    else await run(4);
    let best = 0;
    for (let i = 0; i < reps; i++) {
      best = Math.max(best, prefill > 0 ? (batch * prefill) / (await prefillOnce()) : (batch * tokens) / (await run(tokens)));
    }
    return { tokensPerSecond: best, config };
  } finally {
    await model.dispose();
  }
}

function inChild(addon: string, family: KernelFamily, vendor: string | undefined, bf16Weights: string | undefined): Promise<Report> {
  return new Promise((done, fail) => {
    const argv = process.argv.slice(2).filter((arg) => arg !== "--child");
    const env = {
      ...process.env,
      TORCHSERVE_ADDON: addon,
      ...(vendor === undefined ? {} : { SERVICE_CPU_VENDOR: vendor }),
      ...(bf16Weights === undefined ? {} : { SERVICE_BF16_WEIGHTS: bf16Weights }),
    };
    const worker = fork(fileURLToPath(import.meta.url), [...argv, "--kernels", family, "--child"], { env, stdio: ["ignore", "inherit", "inherit", "ipc"] });
    let report: Report | undefined;
    worker.on("message", (message) => (report = message as Report));
    worker.on("error", fail);
    worker.on("exit", (code) => (report && code === 0 ? done(report) : fail(new Error(`${addon}: exited ${code}`))));
  });
}

if (flags.has("child")) {
  child().then(
    (report) => process.send!(report, () => process.exit(0)),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
} else {
  const addons = stringFlag(flags, "addons", "").split(",").filter(Boolean).map((path) => resolve(path));
  const vendors = flags.has("vendors") ? stringFlag(flags, "vendors", "").split(",") : undefined;
  const layouts = flags.has("bf16-weights") ? stringFlag(flags, "bf16-weights", "").split(",") : undefined;
  if (
    !ckpt ||
    addons.length === 0 ||
    (kernelList.length !== 1 && kernelList.length !== addons.length) ||
    (vendors !== undefined && (vendors.length !== addons.length || vendors.some((v) => !["intel", "amd", "auto"].includes(v)))) ||
    (layouts !== undefined && (layouts.length !== addons.length || layouts.some((v) => !["in-place", "packed", "auto"].includes(v))))
  ) {
    console.error(usage);
    process.exit(2);
  }
  for (const addon of [...addons, ckpt]) {
    if (!existsSync(addon)) {
      console.error(`${addon}: no such file`);
      process.exit(2);
    }
  }
  const rounds = numberFlag(flags, "rounds", 3);
  const facts = machineFacts();
  const before = readBandwidth(threads);
  const rates: number[][] = addons.map(() => []);
  let config: Record<string, unknown> = {};
  for (let round = 0; round < rounds; round++) {
    for (const [i, addon] of addons.entries()) {
      const report = await inChild(addon, kernelList[kernelList.length === 1 ? 0 : i]!, vendors?.[i], layouts?.[i]);
      rates[i]!.push(report.tokensPerSecond);
      config = report.config;
    }
  }
  const after = readBandwidth(threads);
  const bytes = streamedWeightBytes(ckpt, config);
  const timed = prefill > 0 ? `prefill of ${prefill} tokens x ${reps}` : `${prompt}-token prompt, ${tokens} tokens x ${reps}`;
  console.log(`${facts.cpu}, ${facts.cores} cores; ${ckpt}, ${kernelList.join(" / ")}, ${threads} thread(s), batch ${batch}, ${timed}, best per round`);
  console.log(`read bandwidth (${threads} thread(s)): ${(before / 1e9).toFixed(1)} GB/s before, ${(after / 1e9).toFixed(1)} after; weights a step streams: ${(bytes / 1e9).toFixed(3)} GB`);
  for (const [i, addon] of addons.entries()) {
    const cells = rates[i]!.map((rate, round) => {
      const share = batch === 1 && prefill === 0 ? `, ${Math.round(((rate * bytes) / Math.max(before, after)) * 100)}%` : "";
      return i === 0 ? `${rate.toFixed(1)}${share}` : `${rate.toFixed(1)}${share} (${(rate / rates[0]![round]!).toFixed(2)}x)`;
    });
    const family =
      (kernelList.length === 1 ? "" : ` (${kernelList[i]})`) +
      (vendors === undefined ? "" : ` (SERVICE_CPU_VENDOR=${vendors[i]})`) +
      (layouts === undefined ? "" : ` (SERVICE_BF16_WEIGHTS=${layouts[i]})`);
    console.log(`${addon}${family}: ${prefill > 0 ? "prompt tok/s" : "tok/s"} ${cells.join(" | ")}`);
  }
  if (batch === 1 && prefill === 0) console.log("(% of the higher of the two bandwidth readings)");
}
