/**
 * Loading reads a checkpoint's large records and converts and packs its large tensors on
 * several threads: runtime/Checkpoint.cc's DeferringReader reads the tensor records of 1 MiB
 * and more into their storages once torch::jit::load returns; common/Parallel.h splits, over
 * threads (where the machine has them, one per 8 MB written), kernels/Kernels.cc's packing of
 * a matrix into panels and the load-time check's widening of a 16-bit checkpoint to float32 and
 * narrowing back. Three checkpoints: the demo model (1 MiB records), a float32 Llama made here
 * with a 16,384 x 256 tied head (a 16 MiB record and matrix), and a bf16 one with a
 * 32,768 x 256 head (16 MiB in bf16, widened to 32 MB). Loaded through the addon, their greedy
 * tokens agree with each checkpoint's own forward run by Python's torch in float32
 * (llama.test.ts's agreement rule and tolerances), on the TorchScript runtime and on the
 * native one, whose load-time check widens and narrows a bf16 checkpoint and which packs its
 * weights from those storages.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import { repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, type ReferenceCase } from "../helpers/nativeSet.js";

const addon = loadAddon();
const demo = join(repoRoot, "models", "brown-gpt.pt");

// A Llama (argv: file, vocabulary, dtype) whose tied head (vocabulary x 256) is its largest
// record and matrix.
const makeWide = `
import json, sys, torch
sys.path.insert(0, sys.argv[4]); sys.path.insert(0, sys.argv[5])
import make_bench_models as m
from torchserve_node.llama import INTERFACE_VERSION, LlamaConfig
torch.manual_seed(0)
model, cfg = m.random_llama(LlamaConfig(vocab_size=int(sys.argv[2]), block_size=128, n_layer=2, n_head=4, n_kv_head=2,
                                        n_embd=256, intermediate_size=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                                        tie_word_embeddings=True))
cfg = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION, tokenizer=m.BYTE_TOKENIZER, dtype=sys.argv[3])
model = model.to(getattr(torch, sys.argv[3])).eval()
torch.jit.save(torch.jit.script(model), sys.argv[1], _extra_files={"config.json": json.dumps(cfg)})
`;

// The checkpoint's largest record, and greedy continuations of its own forward (uncached,
// float32) with each step's margin, as make_hf_fixture.py's _cases makes them.
const reference = `
import json, sys, zipfile, torch
sys.path.insert(0, sys.argv[2])
from make_hf_fixture import _cases
largest = max(info.file_size for info in zipfile.ZipFile(sys.argv[1]).infolist() if "/data/" in info.filename)
model = torch.jit.load(sys.argv[1]).eval().float()  # the reference computes in float32 on the stored weights
def logits_of(seq):
    with torch.no_grad():
        cache = torch.zeros(model.cache_shape(1), dtype=torch.float32)
        logits, _ = model(torch.tensor([seq]), torch.tensor([0]), torch.tensor([len(seq)]), cache)
    return logits[0]
print(json.dumps({"largest": largest, "cases": _cases(logits_of)}))
`;

function python(code: string, args: string[]): string {
  const run = spawnSync("/usr/bin/python3", ["-c", code, ...args], { encoding: "utf8" });
  expect(run.status, run.stderr).to.equal(0);
  return run.stdout;
}

describe("large records read, and large tensors converted and packed, on several threads at load", function () {
  this.timeout(300000);
  const dir = mkdtempSync(join(tmpdir(), "tsn-archive-read-"));
  const wide = join(dir, "wide-head.pt");
  const wide16 = join(dir, "wide-head-bf16.pt");
  const references = new Map<string, ReferenceCase[]>();

  before(function () {
    const paths = [join(repoRoot, "scripts", "bench"), join(repoRoot, "python")];
    python(makeWide, [wide, "16384", "float32", ...paths]);
    python(makeWide, [wide16, "32768", "bfloat16", ...paths]);
    for (const [file, atLeast] of [[demo, 1 << 20], [wide, 16 << 20], [wide16, 16 << 20]] as const) {
      const out = JSON.parse(python(reference, [file, join(repoRoot, "test", "model", "python")])) as {
        largest: number;
        cases: ReferenceCase[];
      };
      // Records this size are the ones read later (and, at 16 MiB, packed on two threads).
      expect(out.largest, file).to.be.at.least(atLeast);
      references.set(file, out.cases);
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const checkpoints = [
    ["demo model", demo, "float32"],
    ["16 MiB head", wide, "float32"],
    ["16 MiB bf16 head", wide16, "bfloat16"],
  ] as const;
  for (const [label, file, dtype] of checkpoints) {
    for (const runtime of ["torchscript", "native"] as const) {
      it(`${label}, ${runtime} runtime: greedy tokens agree with the checkpoint's forward in Python`, async () => {
        const cases = references.get(file)!;
        const model = await addon.loadLanguageModel(file, { device: "cpu", extraFiles: ["config.json"], threads: 2 });
        try {
          const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
          const choice = await model.configure({
            contextLength: 64,
            eosTokenIds: [],
            runtime,
            architecture: String(config.architecture),
            dtype,
            modelConfig: config,
          });
          expect(choice.runtime).to.equal(runtime);
          // llama.test.ts's tolerances: 16 bits 2e-2 on the native runtime, 5e-2 on the TorchScript one.
          const tolerance = dtype === "float32" ? 1e-3 : runtime === "native" ? 2e-2 : 5e-2;
          let compared = 0;
          let total = 0;
          for (const c of cases) {
            const [out] = await model.generate([greedy(c)], null).result;
            compared += agreedSteps(c, Array.from(out!), tolerance, `${label}, ${runtime}`);
            total += c.output_ids.length;
          }
          expect(compared, "steps compared").to.be.at.least(total / 2);
        } finally {
          await model.dispose();
        }
      });
    }
  }
});
