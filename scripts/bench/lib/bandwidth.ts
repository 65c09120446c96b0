/** What a batch-1 decode step can read: the machine's streaming bandwidth and a model's weight bytes. */
import { execFileSync } from "node:child_process";

/** Streaming-read bandwidth (bytes/s) on `threads` threads: the best of 6 sums of a 1 GiB float32 tensor. */
export function readBandwidth(threads: number): number {
  const code = `import time, torch
torch.set_num_threads(${threads})
x = torch.ones(1 << 28)
best = 1e9
for _ in range(6):
    t = time.perf_counter(); x.sum().item(); best = min(best, time.perf_counter() - t)
print(x.numel() * 4 / best)`;
  return Number(execFileSync("/usr/bin/python3", ["-c", code], { encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } }));
}

/** Bytes of weights a batch-1 decode step streams (every matrix once; embeddings are a gather). */
export function weightBytes(config: Record<string, unknown>, bytesPerWeight: number): number {
  const { n_layer: L, n_embd: d, vocab_size: V } = config as Record<string, number>;
  if (config.n_kv_head === undefined) return bytesPerWeight * (L! * 12 * d! * d! + V! * d!);
  const c = config as Record<string, number>;
  const hd = d! / c.n_head!;
  const perLayer = d! * (c.n_head! + 2 * c.n_kv_head!) * hd + c.n_head! * hd * d! + 3 * d! * c.intermediate_size!;
  return bytesPerWeight * (L! * perLayer + V! * d!);
}

/** Bytes per weight of each storage: Q8_0 34 per 32, Q4_0 18; Q4_K_M about 4.85 bits and Q5_K_M 5.69 (llama.cpp's figures for the mixes). */
export const BYTES_PER_WEIGHT = { float32: 4, bfloat16: 2, float16: 2, q8_0: 34 / 32, q4_0: 18 / 32, q4_k_m: 4.85 / 8, q5_k_m: 5.69 / 8 } as const;

/** Bytes per weight of a checkpoint's config.json: its quantization, else its dtype. */
export function bytesPerWeight(config: Record<string, unknown>): number {
  if (
    config.quantization === "q8_0" ||
    config.quantization === "q4_0" ||
    config.quantization === "q4_k_m" ||
    config.quantization === "q5_k_m"
  ) {
    return BYTES_PER_WEIGHT[config.quantization];
  }
  return config.dtype === "float32" || config.dtype === undefined ? BYTES_PER_WEIGHT.float32 : BYTES_PER_WEIGHT.bfloat16;
}

export function weightBytesPerToken(config: Record<string, unknown>): number {
  return weightBytes(config, bytesPerWeight(config));
}

/** Bytes of the tensors stored in a TorchScript archive (its data/ entries, each storage once; zip64 included). */
export function storedTensorBytes(path: string): number {
  const code =
    "import sys, zipfile\n" +
    "print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist() if '/data/' in i.filename))";
  return Number(execFileSync("/usr/bin/python3", ["-c", code, path], { encoding: "utf8" }).trim());
}

/**
 * Bytes a batch-1 decode step of the checkpoint at `path` streams: its stored tensors (a head
 * tied to the embeddings is one storage, read by every step) less GPT-2's position table, which
 * a step only gathers from. This counts each matrix in the storage it really has: a Q4_K_M file
 * keeps some matrices in Q6_K and, where a width is not a multiple of 256, in Q5_0 and Q8_0
 * (the 135M shape's d = 576 matrices), so the nominal 4.85 bits a weight undercounts it (800 MB
 * against 749 at 1B). An untied embedding table is not streamed and its storage is
 * not known here: such a checkpoint gets weightBytesPerToken's nominal count instead.
 */
export function streamedWeightBytes(path: string, config: Record<string, unknown>): number {
  if (config.tie_word_embeddings === false) return weightBytesPerToken(config);
  const positions = config.n_kv_head === undefined ? Number(config.block_size) * Number(config.n_embd) * (config.dtype === "float32" || config.dtype === undefined ? 4 : 2) : 0;
  return storedTensorBytes(path) - positions;
}
