/**
 * This engine's native CPU runtime against llama.cpp (through node-llama-cpp's prebuilt CPU
 * binaries), side by side in one run, on random-weight models of real shapes with the same
 * weights in both (scripts/bench/make_bench_models.py: project checkpoints, and GGUF written
 * by scripts/model/export_gguf.py --vocabulary ids):
 *   - GPT-2 small (124M), a Llama of SmolLM-135M's shape (GQA 9/3 heads, SwiGLU, 30 layers) and
 *     one of Llama-3.2-1B's shape (16 layers, d=2048, GQA 32/8, 16-bit only);
 *   - float32 against llama.cpp f32, and our bf16 against llama.cpp f16 (its 16-bit CPU type);
 *     on the llama models, q8_0, q4_0, q4_k_m and q5_k_m against llama.cpp on the same quantized bytes (our
 *     checkpoint's GGUF rows written into its GGUF file);
 *   - our native runtime under every kernel family the CPU has (or those --kernels names);
 *   - decode tokens/s at batch 1, 4 and 16 with 1 and 2 threads, all rows in one forward per
 *     step on both sides: our scheduler batches the rows; llama.cpp's side holds each step
 *     until every row's token is queued, so node-llama-cpp puts them all in one llama_decode,
 *     and counts the llama_decode calls: a cell whose count is off is not reported;
 *   - the time to the first token of a 16-token prompt (batch 1), and the prefill of a
 *     400-token prompt;
 *   - the memory bandwidth measured in the same run (a 1 GiB streaming sum), and the fraction of
 *     it that batch-1 decode reaches: the bytes a step streams (the checkpoint's stored tensors,
 *     lib/bandwidth.ts streamedWeightBytes) x tokens/s / bandwidth.
 *
 *   node dist/scripts/bench/vs-llamacpp.js [--quick] [--new-tokens 32] [--models gpt2-small,llama-135m,llama-1b]
 *        [--kernels avx2,baseline] [--threads 1,2] [--precisions f32,bf16,q8_0,q4_0,q4_k_m,q5_k_m] [--batches 1,4,16]
 *        [--llamacpp-cpu match|best|haswell|zen4|...]
 *
 * llama.cpp ships a CPU build per instruction set and loads the best one the CPU runs; when only
 * the avx2 kernels are timed, its AVX2 build (haswell) runs instead, so that an AVX-512 host
 * compares AVX2 code with AVX2 code (lib/llamaCppBuild.ts). The table's header names the build.
 *
 * Prints a table of ratios (ours / llama.cpp) and writes .cache/bench/vs-llamacpp-<time>.json.
 */
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";

import type { LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";

import { loadAddon } from "../../src/native/binding.js";
import { kernelFamiliesToTime } from "./lib/args.js";
import { importNodeLlamaCpp, llamaCppCpuBuilds, matchingLlamaCppBuild } from "./lib/llamaCppBuild.js";
import type { KernelFamily } from "../../src/native/types.js";
import { readBandwidth, streamedWeightBytes } from "./lib/bandwidth.js";
import { machineFacts } from "./lib/machine.js";
import { loadNativeForTiming } from "./lib/nativeModel.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    "new-tokens": { type: "string", default: "32" },
    models: { type: "string", default: "gpt2-small,llama-135m,llama-1b" },
    kernels: { type: "string" },
    threads: { type: "string", default: "1,2" },
    precisions: { type: "string", default: "f32,bf16,q8_0,q4_0,q4_k_m,q5_k_m" },
    batches: { type: "string" },
    "prefill-tokens": { type: "string", default: "400" },
    "llamacpp-cpu": { type: "string", default: "match" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node dist/scripts/bench/vs-llamacpp.js [options]
  --new-tokens N   tokens decoded per row and measurement (default 32; --quick 12; llama-1b at most 8)
  --models LIST    gpt2-small,llama-135m,llama-1b (default all three)
  --kernels LIST   native kernel families, comma-separated (default: every family the CPU has)
  --threads LIST   thread counts (default 1,2)
  --precisions LIST  f32,bf16,q8_0,q4_0,q4_k_m,q5_k_m (default all; the quantized ones on llama models)
  --batches LIST   decode batch sizes (default 1,4,16; --quick 1,4)
  --prefill-tokens N  the prefill prompt's length (default 400)
  --llamacpp-cpu NAME  which of llama.cpp's CPU builds runs: match (default: where one kernel
                   family is timed, llama.cpp's build for the same instruction set: amx
                   sapphirerapids, avx512_bf16 cooperlake, avx512 skylakex, avx2 haswell,
                   baseline x64; with several, ggml's pick, the best this CPU runs), best, or a
                   build's name (${llamaCppCpuBuilds().join(", ")})
  --quick          fewer tokens, batch 1 and 4 only`);
  process.exit(0);
}
/** The whole numbers >= 1 of a comma-separated option; a usage error (not a crash minutes in) otherwise. */
function counts(option: string, text: string): number[] {
  const values = text.split(",").map(Number);
  if (values.some((v) => !Number.isInteger(v) || v < 1)) {
    console.error(`--${option} takes whole numbers >= 1 (comma-separated where a list), got ${JSON.stringify(text)}`);
    process.exit(2);
  }
  return values;
}
const newTokens = args.quick ? 12 : counts("new-tokens", args["new-tokens"]!)[0]!;
const batches = args.batches ? counts("batches", args.batches) : args.quick ? [1, 4] : [1, 4, 16];
const threadCounts = counts("threads", args.threads!);
const promptLen = 16;
const prefillLen = counts("prefill-tokens", args["prefill-tokens"]!)[0]!;
const python = "/usr/bin/python3";

const families = kernelFamiliesToTime(args.kernels, loadAddon().kernelFamilies);

type Files = Partial<
  Record<"f32.pt" | "bf16.pt" | "f32.gguf" | "f16.gguf" | "q8_0.pt" | "q8_0.gguf" | "q4_0.pt" | "q4_0.gguf" | "q4_k_m.pt" | "q4_k_m.gguf" | "q5_k_m.pt" | "q5_k_m.gguf", string>
>;
const files = JSON.parse(
  execFileSync(python, [join(repoRoot, "scripts", "bench", "make_bench_models.py"), "--models", args.models!, "--precisions", args.precisions!], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  }),
) as Record<string, Files>;
/** A 1B model decodes a few tokens a second on a CPU: fewer tokens and repeats keep its rows to minutes. */
const isLarge = (name: string) => name === "llama-1b";

const prompt = (length: number, offset = 0): number[] => Array.from({ length }, (_, i) => 300 + ((i * 7 + offset) % 200));

/** The fastest of `repeats` timings (the others were slowed by a neighbour: this host is shared). */
async function best(time: () => Promise<number>, repeats: number): Promise<number> {
  let fastest = Infinity;
  for (let i = 0; i < repeats; i++) fastest = Math.min(fastest, await time());
  return fastest;
}

interface Arm {
  /** Seconds per decode step, by batch (NaN: not measured faithfully, see `problems`). */
  step: Record<number, number>;
  /** Seconds to the first token of a promptLen-token prompt, batch 1. */
  firstTokenSeconds: number;
  prefillSeconds: number;
  firstTokens: number[];
  problems: string[];
}

interface Plan {
  tokens: number;
  repeats: number;
}

/**
 * Seconds per decode step at each batch size, (t(1 + N tokens) - t(1 token)) / N with each t
 * the best of plan.repeats after a warm-up, and the first token's time at batch 1; `time`
 * generates `tokens` tokens for each of `batch` rows of the promptLen-token prompt.
 */
async function decodeSteps(
  time: (batch: number, tokens: number) => Promise<number>,
  plan: Plan,
): Promise<Pick<Arm, "step" | "firstTokenSeconds">> {
  const step: Record<number, number> = {};
  let firstTokenSeconds = NaN;
  for (const batch of batches) {
    await time(batch, 2);
    const one = await best(() => time(batch, 1), plan.repeats);
    const many = await best(() => time(batch, 1 + plan.tokens), plan.repeats);
    step[batch] = (many - one) / plan.tokens;
    if (batch === 1) firstTokenSeconds = one;
  }
  return { step, firstTokenSeconds };
}

async function ours(path: string, threads: number, kernels: KernelFamily, plan: Plan): Promise<Arm> {
  // End-of-sequence off and no prefix cache: the repeated timing runs compute their prompts and
  // every token, as llama.cpp's do.
  const { model } = await loadNativeForTiming(path, threads, kernels);
  try {
    const run = async (batch: number, length: number, tokens: number): Promise<[number, number[]]> => {
      const rows = Array.from({ length: batch }, (_, r) => ({
        tokens: Int32Array.from(prompt(length, r)), maxNewTokens: tokens, sampling: { temperature: 0, topK: 0, seed: -1 },
      }));
      const start = performance.now();
      const out = await model.generate(rows, null).result;
      return [(performance.now() - start) / 1000, Array.from(out[0]!)];
    };
    const { step, firstTokenSeconds } = await decodeSteps(async (batch, tokens) => (await run(batch, promptLen, tokens))[0], plan);
    const prefillSeconds = await best(async () => (await run(1, prefillLen, 1))[0], Math.min(plan.repeats, 2));
    const [, firstTokens] = await run(1, promptLen, 8);
    return { step, firstTokenSeconds, prefillSeconds, firstTokens, problems: [] };
  } finally {
    await model.dispose();
  }
}

async function llamaCpp(model: LlamaModel, threads: number, plan: Plan): Promise<Arm> {
  // Each step waits until every row of the run has queued its token, then dispatches them as
  // one batch (and rows wait for each other, below). With node-llama-cpp's default ("next
  // cycle") a row whose token arrived a moment late went into a step of its own: a batch-4 run
  // on a 1B model took 3-row steps, 12 llama_decode calls for 9 tokens, understating
  // llama.cpp at batch 4 and 16.
  // The wait spins on the event loop, so it lasts only while a timed run is open: a row that
  // stops (the run's last token) may leave a decode queued, and polling for its partners then
  // spun for 5 s, into the next run and into our arm, taking a core from whichever ran (2-thread
  // figures of both sides at a fraction of their rate). Outside a run, queued work goes at once.
  const gate = { rows: 1, decodes: 0, open: false };
  let context: LlamaContext | undefined;
  const queued = () => (context as unknown as { _queuedDecodeSequenceIds: Set<number> })._queuedDecodeSequenceIds.size;
  context = await model.createContext({
    contextSize: 1024, sequences: Math.max(...batches), batchSize: 512, threads, flashAttention: false,
    batching: {
      dispatchSchedule: (dispatch) => {
        const since = performance.now();
        const poll = () =>
          !gate.open || queued() >= gate.rows || performance.now() - since > 5000 ? dispatch() : setImmediate(poll);
        setImmediate(poll);
      },
    },
  });
  // Counts llama_decode calls (node-llama-cpp's binding runs one per dispatched batch).
  const binding = (context as unknown as { _ctx: { decodeBatch: (...a: unknown[]) => Promise<unknown> } })._ctx;
  const decodeBatch = binding.decodeBatch.bind(binding);
  Object.defineProperty(binding, "decodeBatch", {
    value: (...a: unknown[]) => {
      gate.decodes++;
      return decodeBatch(...a);
    },
  });
  const problems: string[] = [];
  try {
    const sequences: LlamaContextSequence[] = Array.from({ length: Math.max(...batches) }, () => context!.getSequence());
    // Every row evaluates its prompt and then `tokens` greedy tokens; one llama_decode per step
    // (the prompts', then one per further token) is what a faithful run takes.
    const run = async (batch: number, tokens: number): Promise<[number, number[]]> => {
      await Promise.all(sequences.slice(0, batch).map((s) => s.clearHistory()));
      gate.rows = batch;
      gate.decodes = 0;
      // A row asks for its next token only once every row has its current one, in a later
      // macrotask: node-llama-cpp's dispatch loop decodes whatever is queued when a decode
      // ends, so a row that asked early would otherwise be decoded alone.
      let arrived = 0;
      let waiting: Array<() => void> = [];
      const barrier = () =>
        new Promise<void>((resolve) => {
          waiting.push(resolve);
          if (++arrived === batch) {
            const release = waiting;
            arrived = 0;
            waiting = [];
            setImmediate(() => release.forEach((go) => go()));
          }
        });
      gate.open = true;
      const start = performance.now();
      const outs = await Promise.all(
        sequences.slice(0, batch).map(async (sequence, r) => {
          const got: number[] = [];
          for await (const token of sequence.evaluate(prompt(promptLen, r) as Token[], { temperature: 0 })) {
            got.push(token);
            if (got.length >= tokens) break;
            await barrier();
          }
          return got;
        }),
      );
      const seconds = (performance.now() - start) / 1000;
      gate.open = false;
      if (gate.decodes !== tokens) {
        problems.push(`batch ${batch}, ${tokens} tokens: ${gate.decodes} llama_decode calls, expected ${tokens}`);
        return [NaN, outs[0]!];
      }
      return [seconds, outs[0]!];
    };
    const { step, firstTokenSeconds } = await decodeSteps(async (batch, tokens) => (await run(batch, tokens))[0], plan);
    const prefill = async (): Promise<number> => {
      await sequences[0]!.clearHistory();
      gate.rows = 1;
      const start = performance.now();
      await sequences[0]!.evaluateWithoutGeneratingNewTokens(prompt(prefillLen) as Token[]);
      return (performance.now() - start) / 1000;
    };
    const prefillSeconds = await best(prefill, Math.min(plan.repeats, 2));
    const [, firstTokens] = await run(1, 8);
    return { step, firstTokenSeconds, prefillSeconds, firstTokens, problems };
  } finally {
    await context.dispose();
  }
}

const machine = machineFacts();
const bandwidths = Object.fromEntries(threadCounts.map((t) => [t, readBandwidth(t)])) as Record<number, number>;
const llamaCppBuild = args["llamacpp-cpu"] === "match" ? matchingLlamaCppBuild(families) : args["llamacpp-cpu"] === "best" ? undefined : args["llamacpp-cpu"];
const { module: nodeLlamaCpp, cleanup: cleanupLlamaCpp } = await importNodeLlamaCpp(llamaCppBuild);
const { getLlama, LlamaLogLevel } = nodeLlamaCpp;
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: 0 });
const results: Array<Record<string, unknown>> = [];
const lines: string[] = [];
const problems: string[] = [];
const skipped: string[] = [];
const rate = (batch: number, seconds: number | undefined) => (seconds !== undefined && Number.isFinite(seconds) ? batch / seconds : NaN);
const show = (value: number, digits = 1) => (Number.isFinite(value) ? value.toFixed(digits) : "n/a");
for (const name of args.models!.split(",")) {
  const modelFiles = files[name];
  if (!modelFiles) throw new Error(`unknown model ${name}`);
  const plan: Plan = isLarge(name) ? { tokens: Math.min(newTokens, 8), repeats: 2 } : { tokens: newTokens, repeats: 3 };
  const anyCheckpoint = Object.entries(modelFiles).find(([kind]) => kind.endsWith(".pt"))?.[1];
  if (!anyCheckpoint) {
    // The 1B shape is written in 16 bits and quantized only: --precisions f32 has none of it.
    skipped.push(`${name}: no checkpoint of the precisions asked for (${args.precisions})`);
    continue;
  }
  const configText = execFileSync(python, ["-c", `import json,torch
f={"config.json":""}; torch.jit.load("${anyCheckpoint}", _extra_files=f); c=f["config.json"]; print(c.decode() if isinstance(c, bytes) else c)`], { encoding: "utf8" });
  const config = JSON.parse(configText) as Record<string, number>;
  const pairs = [
    ["f32 vs f32", modelFiles["f32.pt"], modelFiles["f32.gguf"], "float32"],
    ["bf16 vs f16", modelFiles["bf16.pt"], modelFiles["f16.gguf"], "bfloat16"],
    ["q8_0 vs q8_0", modelFiles["q8_0.pt"], modelFiles["q8_0.gguf"], "float32"],
    ["q4_0 vs q4_0", modelFiles["q4_0.pt"], modelFiles["q4_0.gguf"], "float32"],
    ["q4_k_m vs q4_k_m", modelFiles["q4_k_m.pt"], modelFiles["q4_k_m.gguf"], "float32"],
    ["q5_k_m vs q5_k_m", modelFiles["q5_k_m.pt"], modelFiles["q5_k_m.gguf"], "float32"],
  ] as const;
  for (const [precision, ourFile, theirFile, dtype] of pairs) {
    if (!ourFile || !theirFile) continue;
    // The bytes a step streams, the same on both sides (the GGUF file holds the same rows).
    const bytes = streamedWeightBytes(ourFile, { ...config, dtype });
    const theirs = await llama.loadModel({ modelPath: theirFile });
    try {
      for (const threads of threadCounts) {
        const b = await llamaCpp(theirs, threads, plan);
        for (const problem of b.problems) problems.push(`${name} ${precision}, llama.cpp, ${threads} thread(s): ${problem}`);
        for (const kernels of families) {
          const a = await ours(ourFile, threads, kernels, plan);
          const fraction = (bytes / a.step[1]!) / bandwidths[threads]!;
          const fractionTheirs = (bytes / b.step[1]!) / bandwidths[threads]!;
          results.push({ model: name, precision, kernels, threads, plan, ours: a, llamaCpp: b, weightBytes: bytes, bandwidth: bandwidths[threads], fraction, fractionTheirs });
          const cells = batches.map((batch) => {
            const x = rate(batch, a.step[batch]), y = rate(batch, b.step[batch]);
            return `${show(x)} / ${show(y)} (${show(x / y, 2)}x)`;
          });
          const ttft = `${show(a.firstTokenSeconds * 1000, 0)} / ${show(b.firstTokenSeconds * 1000, 0)} ms`;
          const pre = `${show(a.prefillSeconds * 1000, 0)} / ${show(b.prefillSeconds * 1000, 0)} ms (${show(b.prefillSeconds / a.prefillSeconds, 2)}x)`;
          const agree = a.firstTokens.join(",") === b.firstTokens.join(",") ? "yes" : "no";
          lines.push(`| ${name} | ${precision} | ${kernels} | ${threads} | ${cells.join(" | ")} | ${ttft} | ${pre} | ${show(100 * fraction, 0)}% / ${show(100 * fractionTheirs, 0)}% | ${agree} |`);
          process.stderr.write(`${lines.at(-1)}\n`);
        }
      }
    } finally {
      await theirs.dispose();
    }
  }
}
await llama.dispose();
cleanupLlamaCpp();

const header = [
  `${machine.cpu}, ${machine.cores} cores, load ${machine.loadAtStart.toFixed(1)} at start; ${newTokens} new tokens per measurement (llama-1b: ${Math.min(newTokens, 8)}), prompt ${promptLen}`,
  `llama.cpp's CPU build: ${llamaCppBuild ?? "ggml's pick (the best this CPU runs)"}`,
  `measured read bandwidth: ${threadCounts.map((t) => `${t} thread(s) ${(bandwidths[t]! / 1e9).toFixed(1)} GB/s`).join(", ")}`,
  "",
  `| model | precision (ours vs llama.cpp) | our kernels | threads | ${batches.map((b) => `batch ${b} tok/s ours / llama.cpp`).join(" | ")} | first token, ${promptLen}-token prompt | prefill ${prefillLen} tokens | batch-1 bandwidth used (ours / llama.cpp) | first 8 greedy tokens equal |`,
  `|---|---|---|---:|${batches.map(() => "---:").join("|")}|---:|---:|---:|---|`,
];
const footer = [
  ...(problems.length ? ["", "Not reported (n/a), since llama.cpp's steps were not one llama_decode of all rows:", ...problems.map((p) => `- ${p}`)] : []),
  ...(skipped.length ? ["", "Skipped:", ...skipped.map((p) => `- ${p}`)] : []),
];
console.log([...header, ...lines, ...footer].join("\n"));
const file = writeResults("vs-llamacpp", { machine, args: { ...args, newTokens, batches, families }, llamaCppBuild: llamaCppBuild ?? "best", bandwidths, results, problems, table: [...header, ...lines, ...footer] });
console.log(`\nresults: ${file}`);
