/** The committed test checkpoints and their golden outputs (test/model/python/make_fixture.py). */
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const fixturesDir = join(repoRoot, "test", "fixtures");
export const fixture = (name: string): string => join(fixturesDir, name);

export interface GoldenCase {
  name: string;
  prompt: string | null;
  prompt_ids: number[];
  max_new_tokens: number;
  prompt_ids_used: number[];
  output_ids: number[];
  stopped_on_eos: boolean;
  reprefills: number;
  first_logits: number[];
}

export interface GoldenCheckpoint {
  file: string;
  config: { block_size: number; vocab_size: number; tokenizer: { eos_token_id: number | null } };
  batch_order: string[];
  cases: GoldenCase[];
}

interface GoldenFile {
  checkpoints: Record<string, GoldenCheckpoint>;
}

let golden: GoldenFile | undefined;

export function goldenFor(checkpoint: string): GoldenCheckpoint {
  golden ??= JSON.parse(readFileSync(fixture("tiny-gpt.golden.json"), "utf8")) as GoldenFile;
  const found = golden.checkpoints[checkpoint];
  if (!found) throw new Error(`no golden outputs for ${checkpoint}`);
  return found;
}

/**
 * Whether the native runtime reads a bf16 checkpoint's matrices where they lie rather than
 * packing them: SERVICE_BF16_WEIGHTS=in-place (test/native/bf16Weights.test.ts runs the bf16
 * suites under it).
 */
export function readsBf16InPlace(): boolean {
  return process.env.SERVICE_BF16_WEIGHTS === "in-place";
}

/**
 * Whether the native runtime's `family` lays Q4_K rows out in interleaved groups at load (the
 * addon's FamilyRegroups): avx2 everywhere, the AVX-512 families on Intel CPUs only (the CPU
 * vendor as /proc/cpuinfo names it, which is what the addon's cpuid check reads).
 */
export function regroupsQ4K(family: string | undefined): boolean {
  if (family === "avx2") return true;
  if (family === undefined || family === "baseline") return false;
  // SERVICE_CPU_VENDOR picks a vendor's variants whatever the CPU (test/native/otherVendor.test.ts).
  const vendor = process.env.SERVICE_CPU_VENDOR;
  if (vendor === "intel" || vendor === "amd") return vendor === "intel";
  return /^vendor_id\s*:\s*GenuineIntel$/m.test(readFileSync("/proc/cpuinfo", "utf8"));
}
