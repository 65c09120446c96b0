/**
 * Copies of an exported checkpoint with the load-time check's reference logits (extra/
 * load_check.bin, export_gpt.py's load_check_reference) edited or dropped, saved again by
 * Python's torch so that the archive is one torch.jit.save wrote (its records aligned, its CRCs
 * right): for the suites that show what the check does with a stored reference that is wrong,
 * for another probe, or absent.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { repoRoot } from "./fixtures.js";

/**
 * Saves `checkpoint` again at `out` with its other extra files, running the Python lines `edit` first. They see `blob` (the
 * stored bytes), `split` (where its logits start), `tokens` (int64 [2 * (first + 1)]) and
 * `logits` (float32 [4, vocab]), and leave in `blob` what is to be stored (None: nothing; a
 * checkpoint that stores none has `blob` None and the others undefined); `module` is the loaded
 * module and `torchserve_node` importable (export_gpt.load_check_reference(module) stores them anew).
 */
export function resavedWithReference(checkpoint: string, out: string, edit: string): string {
  const code = `
import sys, zipfile, numpy, torch
sys.path.insert(0, sys.argv[3])  # torchserve_node, for an edit that computes the reference anew
with zipfile.ZipFile(sys.argv[1]) as z:
    files = {n.split("/extra/", 1)[1]: "" for n in z.namelist() if "/extra/" in n}
module = torch.jit.load(sys.argv[1], _extra_files=files)
blob = files.pop("load_check.bin", None)
if blob is not None:
    blob = bytes(blob)
    head = numpy.frombuffer(blob[8:40], dtype="<i8")
    first, vocab = int(head[0]), int(head[3])
    split = 40 + 2 * (first + 1) * 8
    tokens = numpy.frombuffer(blob[40:split], dtype="<i8").copy()
    logits = numpy.frombuffer(blob[split:], dtype="<f4").copy().reshape(4, vocab)
${edit}
keep = {name: bytes(content) for name, content in files.items()}
if blob is not None:
    keep["load_check.bin"] = blob
torch.jit.save(module, sys.argv[2], _extra_files=keep)
`;
  const made = spawnSync("/usr/bin/python3", ["-c", code, checkpoint, out, join(repoRoot, "python")], { encoding: "utf8" });
  expect(made.status, made.stderr).to.equal(0);
  return out;
}
