/** Writes a run's results as JSON under .cache/bench/ (git-ignored). */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "./paths.js";

export function writeResults(name: string, data: unknown): string {
  const dir = join(repoRoot, ".cache", "bench");
  mkdirSync(dir, { recursive: true });
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const file = join(dir, `${name}-${stamp}.json`);
  const text = JSON.stringify(data, null, 2) + "\n";
  writeFileSync(file, text);
  writeFileSync(join(dir, `${name}-latest.json`), text);
  return file;
}
