/**
 * Weight records read after torch has parsed the archive (runtime/Checkpoint.cc's
 * DeferringReader: on the CPU, tensor records of 1 MiB and more are read into their storages
 * on several threads once torch::jit::load returns). The demo model's weight records are
 * 1 MiB each: loaded through the addon, its greedy tokens agree with the checkpoint's own
 * forward run by Python's torch (llama.test.ts's agreement rule), on the TorchScript runtime
 * and on the native one, which packs its weights from those storages.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, type ReferenceCase } from "../helpers/nativeSet.js";

const addon = loadAddon();
const checkpoint = join(repoRoot, "models", "brown-gpt.pt");

// The checkpoint's largest record, and greedy continuations of its own forward (uncached,
// float32) with each step's margin, as make_hf_fixture.py's _cases makes them.
const reference = `
import json, sys, zipfile, torch
sys.path.insert(0, sys.argv[2])
from make_hf_fixture import _cases
largest = max(info.file_size for info in zipfile.ZipFile(sys.argv[1]).infolist() if "/data/" in info.filename)
model = torch.jit.load(sys.argv[1]).eval()
def logits_of(seq):
    with torch.no_grad():
        cache = torch.zeros(model.cache_shape(1), dtype=torch.float32)
        logits, _ = model(torch.tensor([seq]), torch.tensor([0]), torch.tensor([len(seq)]), cache)
    return logits[0]
print(json.dumps({"largest": largest, "cases": _cases(logits_of)}))
`;

describe("weight records read after the archive is parsed", function () {
  this.timeout(300000);
  let cases: ReferenceCase[];

  before(function () {
    const run = spawnSync("/usr/bin/python3", ["-c", reference, checkpoint, join(repoRoot, "test", "model", "python")], {
      encoding: "utf8",
    });
    expect(run.status, run.stderr).to.equal(0);
    const out = JSON.parse(run.stdout) as { largest: number; cases: ReferenceCase[] };
    // Records this size are the ones read later; a smaller demo model would not test them.
    expect(out.largest).to.be.at.least(1 << 20);
    cases = out.cases;
  });

  for (const runtime of ["torchscript", "native"] as const) {
    it(`${runtime} runtime: greedy tokens agree with the checkpoint's forward in Python`, async () => {
      const model = await addon.loadLanguageModel(checkpoint, { device: "cpu", extraFiles: ["config.json"], threads: 2 });
      try {
        const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
        const choice = await model.configure({
          contextLength: 64,
          eosTokenIds: [],
          runtime,
          architecture: "gpt",
          dtype: "float32",
          modelConfig: config,
        });
        expect(choice.runtime).to.equal(runtime);
        let compared = 0;
        let total = 0;
        for (const c of cases) {
          const [out] = await model.generate([greedy(c)], null).result;
          compared += agreedSteps(c, Array.from(out!), 1e-3, runtime);
          total += c.output_ids.length;
        }
        expect(compared, "steps compared").to.be.at.least(total / 2);
      } finally {
        await model.dispose();
      }
    });
  }
});
