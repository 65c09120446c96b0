/** Paths the benchmarks need, from the compiled location dist/scripts/bench/lib/. */
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const serverEntry = join(repoRoot, "dist", "src", "server.js");
export const benchDist = join(repoRoot, "dist", "scripts", "bench");
export const benchSrc = join(repoRoot, "scripts", "bench");

export const DEMO_TEXT_MODEL = join(repoRoot, "models", "brown-gpt.pt");
export const RANDOM_TEXT_MODEL = join(repoRoot, ".cache", "bench", "random-gpt.pt");
export const DEMO_RECSYS_MODEL = join(repoRoot, "models", "recsys-demo.pt");

/** The checkpoint to benchmark: --ckpt, else the demo model, else a clear way out. */
export function textCheckpoint(requested: string | undefined): string {
  if (requested) {
    const path = resolve(requested);
    if (!existsSync(path)) throw new Error(`--ckpt ${requested}: no such file`);
    return path;
  }
  if (existsSync(DEMO_TEXT_MODEL)) return DEMO_TEXT_MODEL;
  throw new Error(
    `${DEMO_TEXT_MODEL} is not there yet. Pass --ckpt, e.g. a random model of the same shape:\n` +
      `  /usr/bin/python3 scripts/bench/random_demo_model.py && ... --ckpt ${RANDOM_TEXT_MODEL}`,
  );
}
