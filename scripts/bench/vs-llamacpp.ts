/**
 * This engine's native CPU runtime against llama.cpp (through node-llama-cpp's prebuilt CPU
 * binaries), side by side in one run, on random-weight models of real shapes with the same
 * weights in both (scripts/bench/make_bench_models.py: project checkpoints, and GGUF written
 * by scripts/model/export_gguf.py --vocabulary ids):
 *   - GPT-2 small (124M) and a Llama of SmolLM-135M's shape (GQA 9/3 heads, SwiGLU, 30 layers);
 *   - float32 against llama.cpp f32, and our bf16 against llama.cpp f16 (its 16-bit CPU type);
 *   - decode tokens/s at batch 1, 4 and 16 with 1 and 2 threads (all rows in one forward per
 *     step on both sides: our scheduler batches the rows, node-llama-cpp's batcher puts every
 *     sequence's next token in one llama_decode), and the prefill of a 400-token prompt;
 *   - the memory bandwidth measured in the same run (a 1 GiB streaming sum), and the fraction of
 *     it that batch-1 decode reaches: weight bytes per token x tokens/s / bandwidth.
 *
 *   node dist/scripts/bench/vs-llamacpp.js [--quick] [--new-tokens 32] [--models gpt2-small,llama-135m]
 *
 * Prints a table of ratios (ours / llama.cpp) and writes .cache/bench/vs-llamacpp-<time>.json.
 */
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { getLlama, LlamaLogLevel, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";

import { loadAddon } from "../../src/native/binding.js";
import type { RawLanguageModel } from "../../src/native/types.js";
import { machineFacts } from "./lib/machine.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    "new-tokens": { type: "string", default: "32" },
    models: { type: "string", default: "gpt2-small,llama-135m" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/vs-llamacpp.js [options]
  --new-tokens N   tokens decoded per row and measurement (default 32; --quick 12)
  --models LIST    gpt2-small,llama-135m (default both)
  --quick          fewer tokens, batch 1 and 4 only`);
  process.exit(0);
}
const newTokens = args.quick ? 12 : Number(args["new-tokens"]);
const batches = args.quick ? [1, 4] : [1, 4, 16];
const threadCounts = [1, 2];
const promptLen = 16;
const prefillLen = 400;
const python = "/usr/bin/python3";

type Files = Record<"f32.pt" | "bf16.pt" | "f32.gguf" | "f16.gguf", string>;
const files = JSON.parse(
  execFileSync(python, [join(repoRoot, "scripts", "bench", "make_bench_models.py")], { encoding: "utf8" }),
) as Record<string, Files>;

/** Streaming-read bandwidth (bytes/s): the best of 5 sums of a 1 GiB float32 tensor. */
function bandwidth(threads: number): number {
  const code = `import time, torch
torch.set_num_threads(${threads})
x = torch.ones(1 << 28)
best = 1e9
for _ in range(6):
    t = time.perf_counter(); x.sum().item(); best = min(best, time.perf_counter() - t)
print(x.numel() * 4 / best)`;
  return Number(execFileSync(python, ["-c", code], { encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } }));
}

const prompt = (length: number, offset = 0): number[] => Array.from({ length }, (_, i) => 300 + ((i * 7 + offset) % 200));

/** The fastest of `repeats` timings (the others were slowed by a neighbour: this host is shared). */
async function best(time: () => Promise<number>, repeats = 3): Promise<number> {
  let fastest = Infinity;
  for (let i = 0; i < repeats; i++) fastest = Math.min(fastest, await time());
  return fastest;
}

interface Arm {
  /** Seconds per decode step, by batch. */
  step: Record<number, number>;
  prefillSeconds: number;
  firstTokens: number[];
}

async function ours(path: string, threads: number): Promise<Arm> {
  const model: RawLanguageModel = await loadAddon().loadLanguageModel(path, { device: "cpu", threads, extraFiles: ["config.json"] });
  try {
    const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
    const chosen = await model.configure({
      contextLength: Number(config.block_size),
      eosTokenIds: [],
      runtime: "native",
      architecture: String(config.architecture),
      dtype: config.dtype as "float32" | "bfloat16",
      modelConfig: config,
    });
    if (chosen.runtime !== "native") throw new Error(`native runtime refused: ${chosen.note}`);
    const run = async (batch: number, length: number, tokens: number): Promise<[number, number[]]> => {
      const rows = Array.from({ length: batch }, (_, r) => ({
        tokens: Int32Array.from(prompt(length, r)), maxNewTokens: tokens, sampling: { temperature: 0, topK: 0, seed: -1 },
      }));
      const start = performance.now();
      const out = await model.generate(rows, null).result;
      return [(performance.now() - start) / 1000, Array.from(out[0]!)];
    };
    const step: Record<number, number> = {};
    for (const batch of batches) {
      await run(batch, promptLen, 2);
      const one = await best(async () => (await run(batch, promptLen, 1))[0]);
      const many = await best(async () => (await run(batch, promptLen, 1 + newTokens))[0]);
      step[batch] = (many - one) / newTokens;
    }
    const prefillSeconds = Math.min((await run(1, prefillLen, 1))[0], (await run(1, prefillLen, 1))[0]);
    const [, firstTokens] = await run(1, promptLen, 8);
    return { step, prefillSeconds, firstTokens };
  } finally {
    await model.dispose();
  }
}

async function llamaCpp(model: LlamaModel, threads: number): Promise<Arm> {
  const context: LlamaContext = await model.createContext({
    contextSize: 1024, sequences: Math.max(...batches), batchSize: 512, threads, flashAttention: false,
  });
  try {
    const sequences: LlamaContextSequence[] = batches.length ? Array.from({ length: Math.max(...batches) }, () => context.getSequence()) : [];
    // Every row evaluates its prompt and then `tokens` greedy tokens; the rows run concurrently,
    // so node-llama-cpp's batcher feeds all of them to one llama_decode per step.
    const run = async (batch: number, tokens: number): Promise<[number, number[]]> => {
      await Promise.all(sequences.slice(0, batch).map((s) => s.clearHistory()));
      const start = performance.now();
      const outs = await Promise.all(
        sequences.slice(0, batch).map(async (sequence, r) => {
          const got: number[] = [];
          for await (const token of sequence.evaluate(prompt(promptLen, r) as Token[], { temperature: 0 })) {
            got.push(token);
            if (got.length >= tokens) break;
          }
          return got;
        }),
      );
      return [(performance.now() - start) / 1000, outs[0]!];
    };
    const step: Record<number, number> = {};
    for (const batch of batches) {
      await run(batch, 2);
      const one = await best(async () => (await run(batch, 1))[0]);
      const many = await best(async () => (await run(batch, 1 + newTokens))[0]);
      step[batch] = (many - one) / newTokens;
    }
    const prefill = async (): Promise<number> => {
      await sequences[0]!.clearHistory();
      const start = performance.now();
      await sequences[0]!.evaluateWithoutGeneratingNewTokens(prompt(prefillLen) as Token[]);
      return (performance.now() - start) / 1000;
    };
    const prefillSeconds = Math.min(await prefill(), await prefill());
    const [, firstTokens] = await run(1, 8);
    return { step, prefillSeconds, firstTokens };
  } finally {
    await context.dispose();
  }
}

/** Bytes of weights a batch-1 decode step streams (every matrix once; embeddings are a gather). */
function weightBytes(config: Record<string, number>, bytesPerWeight: number): number {
  const { n_layer: L, n_embd: d, vocab_size: V } = config as Record<string, number>;
  if (config.n_kv_head === undefined) return bytesPerWeight * (L! * 12 * d! * d! + V! * d!);
  const hd = d! / config.n_head!;
  const perLayer = d! * (config.n_head! + 2 * config.n_kv_head) * hd + config.n_head! * hd * d! + 3 * d! * config.intermediate_size!;
  return bytesPerWeight * (L! * perLayer + V! * d!);
}

const machine = machineFacts();
const bandwidths = Object.fromEntries(threadCounts.map((t) => [t, bandwidth(t)])) as Record<number, number>;
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: 0 });
const results: Array<Record<string, unknown>> = [];
const lines: string[] = [];
for (const name of args.models!.split(",")) {
  const modelFiles = files[name];
  if (!modelFiles) throw new Error(`unknown model ${name}`);
  const configText = execFileSync(python, ["-c", `import json,torch
f={"config.json":""}; torch.jit.load("${modelFiles["f32.pt"]}", _extra_files=f); c=f["config.json"]; print(c.decode() if isinstance(c, bytes) else c)`], { encoding: "utf8" });
  const config = JSON.parse(configText) as Record<string, number>;
  for (const [precision, ourFile, theirFile, bytesPerWeight] of [
    ["f32 vs f32", modelFiles["f32.pt"], modelFiles["f32.gguf"], 4],
    ["bf16 vs f16", modelFiles["bf16.pt"], modelFiles["f16.gguf"], 2],
  ] as const) {
    const theirs = await llama.loadModel({ modelPath: theirFile });
    try {
      for (const threads of threadCounts) {
        const a = await ours(ourFile, threads);
        const b = await llamaCpp(theirs, threads);
        const bytes = weightBytes(config, bytesPerWeight);
        const fraction = (bytes / a.step[1]!) / bandwidths[threads]!;
        const fractionTheirs = (bytes / b.step[1]!) / bandwidths[threads]!;
        results.push({ model: name, precision, threads, ours: a, llamaCpp: b, weightBytes: bytes, bandwidth: bandwidths[threads], fraction, fractionTheirs });
        const cells = batches.map((batch) => {
          const x = batch / a.step[batch]!, y = batch / b.step[batch]!;
          return `${x.toFixed(1)} / ${y.toFixed(1)} (${(x / y).toFixed(2)}x)`;
        });
        const pre = `${(a.prefillSeconds * 1000).toFixed(0)} / ${(b.prefillSeconds * 1000).toFixed(0)} ms (${(b.prefillSeconds / a.prefillSeconds).toFixed(2)}x)`;
        const agree = a.firstTokens.join(",") === b.firstTokens.join(",") ? "yes" : "no";
        lines.push(`| ${name} | ${precision} | ${threads} | ${cells.join(" | ")} | ${pre} | ${(100 * fraction).toFixed(0)}% / ${(100 * fractionTheirs).toFixed(0)}% | ${agree} |`);
        process.stderr.write(`${lines.at(-1)}\n`);
      }
    } finally {
      await theirs.dispose();
    }
  }
}
await llama.dispose();

const header = [
  `${machine.cpu}, ${machine.cores} cores, load ${machine.loadAtStart.toFixed(1)} at start; ${newTokens} new tokens per measurement, prompt ${promptLen}`,
  `measured read bandwidth: ${threadCounts.map((t) => `${t} thread(s) ${(bandwidths[t]! / 1e9).toFixed(1)} GB/s`).join(", ")}`,
  "",
  `| model | precision (ours vs llama.cpp) | threads | ${batches.map((b) => `batch ${b} tok/s ours / llama.cpp`).join(" | ")} | prefill ${prefillLen} tokens | batch-1 bandwidth used (ours / llama.cpp) | first 8 greedy tokens equal |`,
  `|---|---|---:|${batches.map(() => "---:").join("|")}|---:|---:|---|`,
];
console.log([...header, ...lines].join("\n"));
const file = writeResults("vs-llamacpp", { machine, args: { ...args, newTokens, batches }, bandwidths, results, table: [...header, ...lines] });
console.log(`\nresults: ${file}`);
