/**
 * A model handed to the server in a form it does not serve as it is (a GGUF file, a Hugging
 * Face directory, a safetensors file, a torch.save() checkpoint) fails the load naming that
 * form and the command that converts it, through both apps' loaders; a real checkpoint, and a
 * damaged one (the addon's to describe), are not taken for one.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { foreignCheckpointReason } from "../../src/checkpoint/foreignFormats.js";
import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { TorchRecommender } from "../../src/recsys/TorchRecommender.js";
import { fixture, repoRoot } from "../helpers/fixtures.js";
import { rejection } from "../helpers/rejection.js";

describe("checkpoints in another format are named, with their conversion", function () {
  this.timeout(120000);
  let dir: string;
  const at = (name: string) => join(dir, name);

  before(() => {
    dir = mkdtempSync(join(tmpdir(), "foreign-formats-"));
    // The files as the tools that make them write them.
    const made = spawnSync("/usr/bin/python3", ["-c", `
import json, struct, sys, torch, zipfile
d = sys.argv[1]
torch.save({"model": {"w": torch.zeros(3)}, "model_args": {}}, d + "/ckpt.pt")
torch.save({"w": torch.zeros(3)}, d + "/legacy.pt", _use_new_zipfile_serialization=False)
header = json.dumps({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}).encode()
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(header)) + header + bytes(12))
with zipfile.ZipFile(d + "/other.zip", "w") as z:
    z.writestr("bundle/readme.txt", "not a model")
`, dir], { encoding: "utf8" });
    expect(made.status, made.stderr).to.equal(0);
    // GGUF version 3, no tensors, no metadata: the header alone is what names it.
    const gguf = Buffer.alloc(24);
    gguf.write("GGUF", 0, "latin1");
    gguf.writeUInt32LE(3, 4);
    writeFileSync(at("model.gguf"), gguf);
    mkdirSync(at("hf-model"));
    writeFileSync(at("hf-model/config.json"), "{}");
    mkdirSync(at("empty-dir"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const cases: [string, RegExp][] = [
    ["model.gguf", /is a GGUF file\. .*import_gguf\.py .*model\.gguf OUT\.pt/],
    ["hf-model", /is a directory with a config\.json \(a Hugging Face model\?\).*export_hf\.py .*hf-model OUT\.pt/],
    ["empty-dir", /is a directory, not a checkpoint file/],
    ["model.safetensors", /is a safetensors file .*export_hf\.py DIR OUT\.pt/],
    ["ckpt.pt", /is a torch\.save\(\) checkpoint .*export_gpt\.py.*export_hf\.py/],
    ["legacy.pt", /is a Python pickle \(a torch\.save\(\) checkpoint\?\).*export_gpt\.py/],
    ["other.zip", /is a zip archive but not a TorchScript checkpoint \(no code\/ or constants\.pkl under bundle\/\)/],
  ];

  it("TorchEngine.load: ERR_CHECKPOINT_INVALID naming the format and its conversion", async () => {
    for (const [name, words] of cases) {
      const err = await rejection(TorchEngine.load(at(name)));
      expect(err.code, name).to.equal("ERR_CHECKPOINT_INVALID");
      expect(err.message, name).to.match(words);
      expect(err.message, name).to.contain(at(name));
    }
  });

  it("TorchRecommender.load: the format, and what writes a recommender checkpoint", async () => {
    for (const [name] of cases) {
      const err = await rejection(TorchRecommender.load(at(name)));
      expect(err.code, name).to.equal("ERR_CHECKPOINT_INVALID");
      expect(err.message, name).to.contain(`${at(name)} is `);
      expect(err.message, name).to.contain("scripts/recsys/train.py");
    }
  });

  it("takes neither a real checkpoint nor a damaged one for another format", () => {
    for (const file of [fixture("tiny-gpt.pt"), fixture("tiny-gpt-hf.pt"), join(repoRoot, "models", "recsys-demo.pt"), fixture("broken/truncated.pt"), fixture("broken/corrupt.pt"), at("missing.pt")]) {
      expect(foreignCheckpointReason(file, "language-model"), file).to.equal(undefined);
    }
    // A TorchScript archive renamed .gguf is still one.
    copyFileSync(fixture("tiny-gpt.pt"), at("renamed.gguf"));
    expect(foreignCheckpointReason(at("renamed.gguf"), "language-model")).to.equal(undefined);
  });

  it("a damaged archive keeps the addon's description", async () => {
    const err = await rejection(TorchEngine.load(fixture("broken/truncated.pt")));
    expect(err.code).to.equal("ERR_CHECKPOINT_INVALID");
    expect(err.message).to.match(/truncated|readable/);
  });
});
