/**
 * The tiny random-weight checkpoints of `make_hf_fixture.py --native-set` (llama, Qwen, GPT in
 * float32, 16 bits and quantized types) with the Python reference's greedy outputs, made once
 * per test process and shared by the suites that need them (its quantized exports take a while),
 * and the agreement rule those suites hold the native outputs to.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";

import type { RawGenerateRow } from "../../src/native/types.js";
import { repoRoot } from "./fixtures.js";

export interface ReferenceCase {
  prompt_ids: number[];
  output_ids: number[];
  margins: number[];
  scales: number[];
}

export interface ReferenceCheckpoint {
  file: string;
  dtype: "float32" | "bfloat16" | "float16";
  quantization?: string;
  architecture: string;
  cases: ReferenceCase[];
}

let made: Record<string, ReferenceCheckpoint> | undefined;

/**
 * The set, by variant name (made on first call; removed when the process exits). TEST_NATIVE_SET
 * names a folder where `make_hf_fixture.py DIR --native-set` already made it: scripts/gpu-check.sh
 * sets it, to a set the host's own Python made or to one made elsewhere and copied there (for a
 * host whose /usr/bin/python3 has no torch, as on GPU images).
 */
export function nativeFixtureSet(): Record<string, ReferenceCheckpoint> {
  if (made) return made;
  const prebuilt = process.env.TEST_NATIVE_SET;
  if (prebuilt) {
    const set = JSON.parse(readFileSync(join(prebuilt, "reference.json"), "utf8")) as Record<string, ReferenceCheckpoint>;
    // Every file of the set lies directly in its folder, wherever that folder was when it was made.
    for (const checkpoint of Object.values(set)) checkpoint.file = join(prebuilt, basename(checkpoint.file));
    made = set;
    return made;
  }
  const dir = mkdtempSync(join(tmpdir(), "tsn-native-set-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const result = spawnSync("/usr/bin/python3", [join(repoRoot, "test", "model", "python", "make_hf_fixture.py"), dir, "--native-set"], {
    encoding: "utf8",
  });
  expect(result.status, result.stderr).to.equal(0);
  made = JSON.parse(readFileSync(join(dir, "reference.json"), "utf8")) as Record<string, ReferenceCheckpoint>;
  return made;
}

/** A greedy row of the case's prompt, as long as its reference output. */
export const greedy = (c: ReferenceCase): RawGenerateRow => ({
  tokens: Int32Array.from(c.prompt_ids),
  maxNewTokens: c.output_ids.length,
  sampling: { temperature: 0, topK: 0, seed: -1 },
});

/** Steps compared before the output parts from the reference; throws when it parts at a decisive step. */
export function agreedSteps(c: ReferenceCase, output: number[], tolerance: number, label: string): number {
  expect(output.length, label).to.equal(c.output_ids.length);
  for (let i = 0; i < output.length; i++) {
    if (output[i] === c.output_ids[i]) continue;
    const allowed = 2 * tolerance * c.scales[i]!;
    expect(c.margins[i], `${label}: step ${i} chose ${output[i]}, the reference ${c.output_ids[i]} by a margin of ${c.margins[i]}`)
      .to.be.at.most(allowed);
    return i;
  }
  return output.length;
}
