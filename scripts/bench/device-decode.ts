/**
 * Decode speed of the TorchScript runtime (the one that runs on CUDA) on a device, batch 1 to
 * 64: each batch is timed twice, generating 1 token (prefill) and 1 + N tokens; the
 * difference over N is the decode step. scripts/gpu-check.sh runs it on the GPU (and, in its
 * CPU mode, briefly on the CPU so the script cannot rot).
 *
 *   node dist/scripts/bench/device-decode.js [--ckpt models/brown-gpt.pt] [--device cuda]
 *        [--batches 1,8,16,32,64] [--tokens 64] [--prompt 16] [--threads N] [--baseline]
 *        [--dequantize auto|once|every-call] [--optimize auto|on|off]
 *
 * --baseline also times a plain Python TorchScript loop on the same checkpoint, device and
 * shapes in the same run (scripts/bench/engine_decode_baseline.py, with TORCHSERVE_PYTHON or
 * python3) and adds its step and our speed-up to the table. --dequantize is
 * SERVICE_TORCHSCRIPT_DEQUANTIZE for a quantized checkpoint; --optimize is
 * SERVICE_TORCHSCRIPT_OPTIMIZE, and with --baseline the Python loop runs with torch's graph
 * optimiser the same way ("auto" leaves the loop's on, torch's default). The JSON goes to
 * .cache/bench/.
 */
import { execFileSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "./lib/paths.js";
import { writeResults } from "./lib/results.js";

const { values: args } = parseArgs({
  options: {
    ckpt: { type: "string", default: join(repoRoot, "models", "brown-gpt.pt") },
    device: { type: "string", default: "cuda" },
    batches: { type: "string", default: "1,8,16,32,64" },
    tokens: { type: "string", default: "64" },
    prompt: { type: "string", default: "16" },
    threads: { type: "string", default: String(Math.min(8, Math.max(1, availableParallelism() - 1))) },
    baseline: { type: "boolean", default: false },
    dequantize: { type: "string", default: "auto" },
    optimize: { type: "string", default: "auto" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log("usage: node dist/scripts/bench/device-decode.js [--ckpt PATH] [--device cuda] [--batches 1,8,16,32,64] [--tokens 64] [--prompt 16] [--threads N] [--baseline] [--dequantize auto|once|every-call] [--optimize auto|on|off]");
  process.exit(0);
}
const batches = args.batches!.split(",").map(Number);
const tokens = Number(args.tokens);
const promptLength = Number(args.prompt);

/** Decode step seconds of the plain Python TorchScript loop, by batch. */
function pythonLoop(): Record<number, number> {
  const out = execFileSync(
    process.env.TORCHSERVE_PYTHON || "python3",
    [join(repoRoot, "scripts", "bench", "engine_decode_baseline.py"), args.ckpt!, "--device", args.device!,
      "--threads", args.threads!, "--batches", batches.join(","), "--new-tokens", String(tokens),
      "--prompt-len", String(promptLength), "--prefill-len", String(promptLength),
      ...(args.optimize === "off" ? ["--optimize", "off"] : [])],
    { encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } },
  );
  return (JSON.parse(out) as { decode_step_seconds: Record<number, number> }).decode_step_seconds;
}

const model = await loadAddon().loadLanguageModel(args.ckpt!, { device: args.device!, extraFiles: ["config.json"], threads: Number(args.threads) });
try {
  const config = JSON.parse(model.extraFiles["config.json"] ?? "{}") as { block_size: number; dtype?: string; tokenizer?: { eos_token_id?: number | null } };
  const dtype = (config.dtype ?? "float32") as "float32" | "bfloat16" | "float16";
  // No end-of-sequence: every row runs to its limit, so the step count is known.
  const dequantize = args.dequantize as "auto" | "once" | "every-call";
  const { note } = await model.configure({ contextLength: config.block_size, eosTokenIds: [], runtime: "torchscript", dtype, torchscriptDequantize: dequantize,
    torchscriptOptimize: args.optimize as "auto" | "on" | "off" });
  if (note) console.log(`device-decode: ${note}`);
  const rows = (batch: number, maxNewTokens: number) =>
    Array.from({ length: batch }, (_, i) => ({
      tokens: Int32Array.from({ length: promptLength }, (_, t) => 97 + ((i + t) % 26)),
      maxNewTokens,
      sampling: { temperature: 0, topK: 0, seed: -1 },
    }));
  const time = async (batch: number, maxNewTokens: number) => {
    const start = performance.now();
    await model.generate(rows(batch, maxNewTokens), null).result;
    return performance.now() - start;
  };
  const rowsOut: Array<{ batch: number; prefillMs: number; stepMs: number; tokensPerSecond: number; pythonStepMs?: number }> = [];
  for (const batch of batches) {
    await time(batch, 2); // warm-up of this shape
    const prefill = Math.min(await time(batch, 1), await time(batch, 1));
    const whole = Math.min(await time(batch, 1 + tokens), await time(batch, 1 + tokens));
    const step = Math.max(whole - prefill, 1e-3) / tokens;
    rowsOut.push({ batch, prefillMs: prefill, stepMs: step, tokensPerSecond: (batch * 1000) / step });
  }
  // After ours, so the two never share the device.
  const python = args.baseline ? pythonLoop() : null;
  console.log(`device-decode: ${args.ckpt} on ${model.device} (${dtype}), prompt ${promptLength} tokens, ${tokens} new tokens\n`);
  console.log(`| batch | prefill ms | decode step ms | tokens/s |${python ? " Python loop step ms | vs Python |" : ""}`);
  console.log(`|---:|---:|---:|---:|${python ? "---:|---:|" : ""}`);
  for (const row of rowsOut) {
    let extra = "";
    if (python) {
      row.pythonStepMs = python[row.batch]! * 1000;
      extra = ` ${row.pythonStepMs.toFixed(2)} | ${(row.pythonStepMs / row.stepMs).toFixed(2)}x |`;
    }
    console.log(`| ${row.batch} | ${row.prefillMs.toFixed(1)} | ${row.stepMs.toFixed(2)} | ${row.tokensPerSecond.toFixed(0)} |${extra}`);
  }
  writeResults("device-decode", { ckpt: args.ckpt, device: model.device, dtype, optimize: args.optimize, promptLength, tokens, rows: rowsOut });
} finally {
  await model.dispose();
}
