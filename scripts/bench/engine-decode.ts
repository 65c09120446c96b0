/**
 * Engine-only decode speed, side by side in one run (this machine is shared: compare ratios):
 *   - the same checkpoint driven by a plain Python TorchScript loop (the baseline),
 *   - this engine on its native runtime under every kernel family the CPU has (or those
 *     named by --kernels), and on its TorchScript runtime,
 * at batch 1, 8 and 32, plus the prefill of a 500-token prompt, and the native runtime's
 * achieved model FLOP/s against the measured matmul rate (512x512 float32, same threads).
 *
 *   node dist/scripts/bench/engine-decode.js [--ckpt models/brown-gpt.pt] [--threads N (default cores - 1, the server's default)]
 *        [--kernels avx2,baseline (default: every family the CPU has)] [--rounds 3] [--new-tokens 128] [--quick]
 *
 * Rounds alternate the three arms so load on the machine hits them alike; the table shows the
 * median of the rounds. Results go to .cache/bench/engine-decode.json.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { loadAddon } from "../../src/native/binding.js";
import { kernelFamiliesToTime } from "./lib/args.js";
import type { KernelFamily, RawLanguageModel } from "../../src/native/types.js";
import { median } from "./lib/stats.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(root, "models", "brown-gpt.pt") },
    threads: { type: "string", default: String(Math.max(1, availableParallelism() - 1)) },
    kernels: { type: "string" },
    rounds: { type: "string", default: "3" },
    "new-tokens": { type: "string", default: "128" },
    quick: { type: "boolean", default: false },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/engine-decode.js [options]
  --ckpt PATH        GPT checkpoint (default models/brown-gpt.pt)
  --threads N        compute threads of every arm (default cores - 1, the server's default)
  --kernels LIST     native kernel families to time, comma-separated (default: all the CPU has)
  --rounds N         rounds, arms alternating (default 3; --quick 1)
  --new-tokens N     tokens decoded per row (default 128; --quick 32)
  --quick            one short round`);
  process.exit(0);
}
const threads = Number(args.threads);
const rounds = args.quick ? 1 : Number(args.rounds);
const newTokens = args.quick ? 32 : Number(args["new-tokens"]);
const batches = [1, 8, 32];
const promptLen = 16;
const prefillLen = 500;
const families = kernelFamiliesToTime(args.kernels, loadAddon().kernelFamilies);

interface Measurement {
  decodeStepSeconds: Record<number, number>;
  prefillSeconds: number;
}

function python(): Measurement & { matmulGflops: number; config: Record<string, number> } {
  const out = execFileSync(
    "/usr/bin/python3",
    [join(root, "scripts", "bench", "engine_decode_baseline.py"), args.ckpt!, "--threads", String(threads),
      "--batches", batches.join(","), "--new-tokens", String(newTokens), "--prompt-len", String(promptLen),
      "--prefill-len", String(prefillLen)],
    { encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } },
  );
  const parsed = JSON.parse(out);
  return {
    decodeStepSeconds: parsed.decode_step_seconds,
    prefillSeconds: parsed.prefill_seconds,
    matmulGflops: parsed.matmul_gflops,
    config: parsed.config,
  };
}

async function generate(model: RawLanguageModel, batch: number, prompt: number, tokens: number): Promise<number> {
  const ids = Int32Array.from({ length: prompt }, (_, i) => 65 + (i % 26));
  const rows = Array.from({ length: batch }, () => ({ tokens: ids, maxNewTokens: tokens, sampling: { temperature: 0, topK: 0, seed: -1 } }));
  const start = performance.now();
  await model.generate(rows, null).result;
  return (performance.now() - start) / 1000;
}

async function ours(
  runtime: "native" | "torchscript",
  config: Record<string, unknown>,
  kernels: KernelFamily | "auto" = "auto",
): Promise<Measurement> {
  const model = await loadAddon().loadLanguageModel(args.ckpt!, { device: "cpu", threads });
  try {
    const chosen = await model.configure({
      contextLength: Number(config.block_size),
      eosTokenIds: [], // decode the full length, like the baseline
      prefixCache: false, // every timed prompt is computed, as the baseline computes it
      runtime,
      kernels,
      architecture: String(config.architecture),
      modelConfig: config,
    });
    if (chosen.runtime !== runtime) throw new Error(`asked for ${runtime}, got ${chosen.runtime}: ${chosen.note}`);
    if (runtime === "native" && kernels !== "auto" && chosen.kernels !== kernels) {
      throw new Error(`asked for the ${kernels} kernels, got ${chosen.kernels}`);
    }
    const decodeStepSeconds: Record<number, number> = {};
    for (const batch of batches) {
      await generate(model, batch, promptLen, 4);
      const one = Math.min(await generate(model, batch, promptLen, 1), await generate(model, batch, promptLen, 1));
      const many = await generate(model, batch, promptLen, 1 + newTokens);
      decodeStepSeconds[batch] = (many - one) / newTokens;
    }
    const prefillSeconds = Math.min(await generate(model, 1, prefillLen, 1), await generate(model, 1, prefillLen, 1));
    return { decodeStepSeconds, prefillSeconds };
  } finally {
    await model.dispose();
  }
}

type Arm = "python" | `native ${KernelFamily}` | "torchscript";
const arms: Arm[] = ["python", ...families.map((f) => `native ${f}` as const), "torchscript"];
const results = Object.fromEntries(arms.map((arm) => [arm, [] as Measurement[]])) as Record<Arm, Measurement[]>;
const baselines: ReturnType<typeof python>[] = [];
const loadBefore = loadavg()[0]!;
for (let round = 0; round < rounds; round++) {
  const baseline = python();
  baselines.push(baseline);
  results.python.push(baseline);
  for (const family of families) results[`native ${family}`].push(await ours("native", baseline.config, family));
  results.torchscript.push(await ours("torchscript", baseline.config));
  process.stderr.write(`round ${round + 1}/${rounds} done\n`);
}
const loadAfter = loadavg()[0]!;

const config = baselines[0]!.config;
const { n_layer: L, n_embd: d, vocab_size: V } = config as Record<string, number>;
// Model FLOPs per decoded token: the linear layers (12 d^2 weights per layer, and the
// d x V head), plus attention over the average context (QK^T and PV: 4 L d p).
const averageContext = promptLen + (newTokens + 1) / 2;
const flopsPerToken = 2 * (12 * L! * d! * d! + d! * V!) + 4 * L! * d! * averageContext;

const step = (arm: Arm, batch: number) => median(results[arm].map((m) => m.decodeStepSeconds[batch]!));
const prefill = (arm: Arm) => median(results[arm].map((m) => m.prefillSeconds));
const matmul = median(baselines.map((m) => m.matmulGflops));

const label = (arm: Arm) =>
  arm === "python" ? "Python TorchScript loop" : arm === "torchscript" ? "ours, TorchScript runtime" : `ours, native runtime, ${arm.slice(7)} kernels`;
const lines: string[] = [];
lines.push(`checkpoint ${args.ckpt} (L=${L} d=${d} V=${V}), ${threads} threads, ${rounds} round(s), ${newTokens} new tokens, load ${loadBefore.toFixed(1)} -> ${loadAfter.toFixed(1)}`);
lines.push("");
lines.push(`| arm | ${batches.map((b) => `batch ${b} tok/s`).join(" | ")} | prefill ${prefillLen} tokens |`);
lines.push(`|---|${batches.map(() => "---:").join("|")}|---:|`);
for (const arm of arms) {
  const cells = batches.map((b) => {
    const tokS = b / step(arm, b);
    const ratio = arm === "python" ? "" : ` (${(step("python", b) / step(arm, b)).toFixed(2)}x)`;
    return `${tokS.toFixed(0)}${ratio}`;
  });
  const pre = `${(prefill(arm) * 1000).toFixed(1)} ms${arm === "python" ? "" : ` (${(prefill("python") / prefill(arm)).toFixed(2)}x)`}`;
  lines.push(`| ${label(arm)} | ${cells.join(" | ")} | ${pre} |`);
}
lines.push("");
lines.push(`matmul rate (512x512 float32, ${threads} threads): ${matmul.toFixed(1)} GFLOP/s; model FLOPs per decoded token: ${(flopsPerToken / 1e6).toFixed(2)} M`);
for (const arm of [...families.map((f) => `native ${f}` as const), "python"] as const) {
  const achieved = (32 * flopsPerToken) / step(arm, 32) / 1e9;
  lines.push(`${label(arm)}, batch 32: ${achieved.toFixed(1)} GFLOP/s = ${((100 * achieved) / matmul).toFixed(0)}% of the matmul rate`);
}
console.log(lines.join("\n"));

const outDir = join(root, ".cache", "bench");
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, "engine-decode.json"),
  JSON.stringify({ args: { ...args, threads, rounds, newTokens }, load: [loadBefore, loadAfter], flopsPerToken, matmulGflops: matmul, results, table: lines }, null, 2),
);
