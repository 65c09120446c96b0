/**
 * Tiny Hugging Face-layout models exported to checkpoints at test time
 * (test/model/python/make_hf_fixture.py + export_hf.py, deterministic, a few seconds), and the
 * Python reference loop (python/torchserve_node/reference.py) as the oracle for their greedy output.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { repoRoot } from "./fixtures.js";

const python = "/usr/bin/python3";
const script = (name: string) => join(repoRoot, "test", "model", "python", name);
/** Python's sys.path for the snippets below: the product package and the fixture generators. */
const pythonPath = JSON.stringify([join(repoRoot, "python"), join(repoRoot, "test", "model", "python")]);

function run(args: string[], input?: string): string {
  const result = spawnSync(python, args, {
    cwd: repoRoot,
    input,
    env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  expect(result.status, `${args.join(" ")}\n${result.stdout}\n${result.stderr}`).to.equal(0);
  return result.stdout;
}

export interface HfCheckpoints {
  dir: string;
  /** Exported checkpoint per fixture name (llama-gqa, llama3-bf16, qwen2, mistral, gpt2). */
  path(name: string): string;
  cleanup(): void;
}

export function exportHfFixtures(names: readonly string[]): HfCheckpoints {
  const dir = mkdtempSync(join(tmpdir(), "hf-fixtures-"));
  run([script("make_hf_fixture.py"), dir, "--export", ...names.flatMap((name) => ["--only", name])]);
  return {
    dir,
    path: (name) => join(dir, `${name}.pt`),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface ReferenceRow {
  prompt_ids: number[];
  output_ids: number[];
  stopped_on_eos: boolean;
  /** Top-1 minus top-2 logit at each step. */
  margins: number[];
}

export interface ReferenceJob {
  checkpoint: string;
  prompts: number[][];
  maxNewTokens: number;
}

/**
 * reference.py's greedy output for each job's prompts (generated as one batch per job), in
 * one Python process: starting Python with torch costs seconds on a busy machine.
 */
export function referenceGreedy(jobs: ReferenceJob[]): ReferenceRow[][] {
  const code = `
import json, sys, torch
sys.path[:0] = ${pythonPath}
from torchserve_node import reference
torch.set_num_threads(1)
out = []
for job in json.loads(sys.stdin.read()):
    ckpt = reference.load(job["checkpoint"])
    trace = []
    outs = reference.generate(ckpt, job["prompts"], job["maxNewTokens"], trace=trace)
    out.append([dict(t, prompt_ids=p, output_ids=o) for p, o, t in zip(job["prompts"], outs, trace)])
print(json.dumps(out))
`;
  return JSON.parse(run(["-c", code], JSON.stringify(jobs))) as ReferenceRow[][];
}

/**
 * A copy of `checkpoint` (sha256 rewritten) whose extra files (the dict `extra`: config.json,
 * tokenizer.json, tokenizer_config.json) the Python lines `edit` change, with `arg` as `arg`.
 */
function rewriteExtraFiles(checkpoint: string, out: string, edit: string, arg: string): string {
  const code = `
import json, sys, torch
sys.path[:0] = ${pythonPath}
from torchserve_node import export_gpt
src, out, arg = sys.argv[1], sys.argv[2], sys.argv[3]
extra = {"config.json": "", "tokenizer.json": "", "tokenizer_config.json": ""}
m = torch.jit.load(src, _extra_files=extra)
${edit}
torch.jit.save(m, out, _extra_files={k: v for k, v in extra.items() if v})
export_gpt.write_sha256(out)
`;
  run(["-c", code, checkpoint, out, arg]);
  return out;
}

/** A copy of `checkpoint` whose config.json ends rows on `eosTokenIds` (sha256 rewritten). */
export function withEosTokenIds(checkpoint: string, out: string, eosTokenIds: number[]): string {
  const edit = `
ids = json.loads(arg)
cfg = json.loads(extra["config.json"])
cfg["tokenizer"]["eos_token_ids"] = ids
cfg["tokenizer"]["eos_token_id"] = ids[0]
extra["config.json"] = json.dumps(cfg)`;
  return rewriteExtraFiles(checkpoint, out, edit, JSON.stringify(eosTokenIds));
}

/** A copy of `checkpoint` whose extra file `name` holds `text` (sha256 rewritten). */
export function withExtraFile(checkpoint: string, out: string, name: string, text: string): string {
  return rewriteExtraFiles(checkpoint, out, `extra[${JSON.stringify(name)}] = arg`, text);
}

/**
 * The fixtures exported to float32 checkpoints and from those to GGUF f32
 * (python/torchserve_node/export_gguf.py), in one Python process: `${name}.pt` and `${name}.gguf`.
 * `vocabulary`: export_gguf.py's --vocabulary (the checkpoint's tokenizer, or placeholder ids).
 */
export function exportGgufFixtures(names: readonly string[], vocabulary: "tokenizer" | "ids" = "tokenizer"): HfCheckpoints {
  const dir = mkdtempSync(join(tmpdir(), "gguf-fixtures-"));
  const code = `
import json, os, sys
sys.path[:0] = ${pythonPath}
import make_hf_fixture
from torchserve_node import export_gguf, export_hf
out = sys.argv[1]
for name in json.loads(sys.argv[2]):
    src = make_hf_fixture.make(name, out)
    export_hf.export(src, os.path.join(out, name + ".pt"), dtype="float32", quiet=True)
    export_gguf.export(os.path.join(out, name + ".pt"), os.path.join(out, name + ".gguf"), quiet=True, vocabulary=sys.argv[3])
`;
  run(["-c", code, dir, JSON.stringify(names), vocabulary]);
  return {
    dir,
    path: (name) => join(dir, `${name}.pt`),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** One fixture exported once per dtype (export_hf.py --dtype), in one Python process: `${name}-${dtype}.pt`. */
export function exportHfDtypes(name: string, dtypes: readonly string[]): HfCheckpoints {
  const dir = mkdtempSync(join(tmpdir(), "hf-dtypes-"));
  const code = `
import json, os, sys
sys.path[:0] = ${pythonPath}
import make_hf_fixture
from torchserve_node import export_hf
out, name = sys.argv[1], sys.argv[2]
src = make_hf_fixture.make(name, out)
for dtype in json.loads(sys.argv[3]):
    export_hf.export(src, os.path.join(out, name + "-" + dtype + ".pt"), dtype=dtype, quiet=True)
`;
  run(["-c", code, dir, name, JSON.stringify(dtypes)]);
  return {
    dir,
    path: (dtype) => join(dir, `${name}-${dtype}.pt`),
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}
