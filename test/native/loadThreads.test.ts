/**
 * Loading reads a checkpoint's large records and converts and packs its large tensors on
 * several threads: runtime/Checkpoint.cc's DeferringReader points the tensor records of 1 MiB
 * and more at a mapping of the file (common/MappedFile.h, under a read lease), or with
 * `mapWeights: false` or no lease reads them into their storages, once torch::jit::load returns; common/Parallel.h splits, over
 * threads (where the machine has them, one per 8 MB written), kernels/Kernels.cc's packing of
 * a matrix into panels and the load-time check's widening of a 16-bit checkpoint to float32 and
 * narrowing back. Four checkpoints: the demo model (1 MiB records), a float32 Llama made here
 * with a 16,384 x 256 tied head (a 16 MiB record and matrix), a bf16 one with a
 * 32,768 x 256 head (16 MiB in bf16, widened to 32 MB), and a Q8_0 one whose MLP matrices are
 * 1.1 MB records (which the SIMD families regroup out of the mapping). A checkpoint truncated
 * and written over while it is served goes on serving what was loaded. Loaded through the addon, their greedy
 * tokens agree with each checkpoint's own forward run by Python's torch in float32
 * (llama.test.ts's agreement rule and tolerances), on the TorchScript runtime and on the
 * native one, whose load-time check widens and narrows a bf16 checkpoint and which packs its
 * weights from those storages.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { closeSync, copyFileSync, mkdtempSync, openSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamilyCap, RawLanguageModel } from "../../src/native/types.js";
import { repoRoot } from "../helpers/fixtures.js";
import { agreedSteps, greedy, type ReferenceCase } from "../helpers/nativeSet.js";

const addon = loadAddon();
const demo = join(repoRoot, "models", "brown-gpt.pt");

// A Llama (argv: file, vocabulary, dtype) whose tied head (vocabulary x 256) is its largest
// record and matrix; "q8_0": a Q8_0 one of width 512 whose MLP matrices (2048 x 512 and back,
// 1.1 MB each) are records of more than 1 MiB too, which the SIMD families regroup.
const makeWide = `
import json, sys, torch
sys.path.insert(0, sys.argv[4]); sys.path.insert(0, sys.argv[5])
import make_bench_models as m
from torchserve_node import export_gpt
from torchserve_node.llama import INTERFACE_VERSION, LlamaConfig, quantize_llama
torch.manual_seed(0)
q8 = sys.argv[3] == "q8_0"
model, cfg = m.random_llama(LlamaConfig(vocab_size=int(sys.argv[2]), block_size=128, n_layer=2, n_head=4, n_kv_head=2,
                                        n_embd=512 if q8 else 256, intermediate_size=2048 if q8 else 512,
                                        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True))
cfg = dict(cfg, format="torchserve-node/causal-lm", interface_version=INTERFACE_VERSION, tokenizer=m.BYTE_TOKENIZER)
if q8:
    quantize_llama(model.float().eval(), "q8_0")
    export_gpt.save_module(model, sys.argv[1], dict(cfg, dtype="float32", quantization="q8_0"))
else:
    model = model.to(getattr(torch, sys.argv[3])).eval()
    torch.jit.save(torch.jit.script(model), sys.argv[1], _extra_files={"config.json": json.dumps(dict(cfg, dtype=sys.argv[3]))})
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
  const wideQ8 = join(dir, "wide-q8_0.pt");
  const references = new Map<string, ReferenceCase[]>();

  before(function () {
    const paths = [join(repoRoot, "scripts", "bench"), join(repoRoot, "python")];
    python(makeWide, [wide, "16384", "float32", ...paths]);
    python(makeWide, [wide16, "32768", "bfloat16", ...paths]);
    python(makeWide, [wideQ8, "4096", "q8_0", ...paths]);
    for (const [file, atLeast] of [[demo, 1 << 20], [wide, 16 << 20], [wide16, 16 << 20], [wideQ8, 1 << 20]] as const) {
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

  const simd = addon.kernelFamilies.length > 1;
  const checkpoints = [
    ["demo model", demo, "float32"],
    ["16 MiB head", wide, "float32"],
    ["16 MiB bf16 head", wide16, "bfloat16"],
    ["Q8_0, 1.1 MB matrices", wideQ8, "float32"],
  ] as const;

  // The cases of `file` run on `model`, each agreeing with the checkpoint's forward.
  async function agree(model: RawLanguageModel, file: string, dtype: string, runtime: string, label: string) {
    const cases = references.get(file)!;
    // llama.test.ts's tolerances: 16 bits 2e-2 on the native runtime, 5e-2 on the TorchScript one;
    // a quantized checkpoint 2e-2 on the native runtime (its activations quantized per block).
    const quantized = file === wideQ8;
    const tolerance =
      dtype === "float32" && !(quantized && runtime === "native") ? 1e-3 : runtime === "native" ? 2e-2 : 5e-2;
    let compared = 0;
    let total = 0;
    for (const c of cases) {
      const [out] = await model.generate([greedy(c)], null).result;
      compared += agreedSteps(c, Array.from(out!), tolerance, label);
      total += c.output_ids.length;
    }
    expect(compared, "steps compared").to.be.at.least(total / 2);
  }

  async function configure(model: RawLanguageModel, runtime: "torchscript" | "native", dtype: string, kernels?: KernelFamilyCap) {
    const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
    const choice = await model.configure({
      contextLength: 64,
      eosTokenIds: [],
      runtime,
      architecture: String(config.architecture),
      dtype: dtype as "float32",
      modelConfig: config,
      ...(kernels === undefined ? {} : { kernels }),
      // As TorchEngine configures: the native runtime then owns the weights (and regroups them).
      releaseModuleWeights: runtime === "native",
    });
    expect(choice.runtime).to.equal(runtime);
    return choice;
  }

  for (const [label, file, dtype] of checkpoints) {
    for (const runtime of ["torchscript", "native"] as const) {
      for (const mapWeights of [true, false]) {
        const how = mapWeights ? "mapping on" : "mapping off";
        it(`${label}, ${runtime} runtime, ${how}: greedy tokens agree with the checkpoint's forward in Python`, async () => {
          const model = await addon.loadLanguageModel(file, { device: "cpu", extraFiles: ["config.json"], threads: 2, mapWeights });
          try {
            const choice = await configure(model, runtime, dtype);
            // Every SIMD family lays Q8_0 rows out anew, so those are read into memory.
            const laidOut = file === wideQ8 && simd;
            expect(choice.note).to.include(
              !mapWeights
                ? "weights read into memory (mapping off)"
                : laidOut
                  ? "weights read into memory (the quantized rows the "
                  : "weights read in place from the checkpoint (mapped, under a read lease)",
            );
            await agree(model, file, dtype, runtime, `${label}, ${runtime}, ${how}`);
          } finally {
            await model.dispose();
          }
        });
      }
    }
  }

  // Every SIMD family regroups the Q8_0 rows (tile panels or interleaved groups), out of place:
  // from the mapping into memory of its own, whose pages the mapping's rows then give back.
  for (const kernels of ["amx", "avx512_bf16", "avx512", "avx2"] as const) {
    it(`Q8_0 mapped, kernels capped at ${kernels}: the regrouped rows agree with the checkpoint's forward`, async () => {
      // Loaded for the baseline family, which rewrites nothing, the Q8_0 rows are mapped; a SIMD
      // family then lays them out out of the mapping.
      const model = await addon.loadLanguageModel(wideQ8, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels: "baseline" });
      try {
        const choice = await configure(model, "native", "float32", kernels);
        expect(choice.note).to.include("weights read in place from the checkpoint");
        expect(choice.note).to.match(/Q8_0 rows (laid out in \d+ tile panels|interleaved in \d+ groups)/);
        await agree(model, wideQ8, "float32", "native", `Q8_0 mapped, ${choice.kernels}`);
      } finally {
        await model.dispose();
      }
    });
  }

  // The lease (common/MappedFile.h): a write to a served checkpoint waits while the process
  // copies the weights it reads, and the server goes on with what it loaded.
  for (const runtime of ["torchscript", "native"] as const) {
    it(`${runtime} runtime: a checkpoint truncated and written over while it is served still serves what it loaded`, async () => {
      const copy = join(dir, `served-${runtime}.pt`);
      copyFileSync(wideQ8, copy);
      // Loaded for the baseline family, so every large record is mapped (the native runtime's
      // family then lays the Q8_0 rows out of the mapping, whose pages it gives back).
      const model = await addon.loadLanguageModel(copy, { device: "cpu", extraFiles: ["config.json"], threads: 2, kernels: "baseline" });
      try {
        const choice = await configure(model, runtime, "float32");
        expect(choice.note).to.include("weights read in place from the checkpoint");
        await agree(model, wideQ8, "float32", runtime, `${runtime} before the write`);
        // open(O_TRUNC) breaks the lease: it returns once the process has its copy.
        writeFileSync(copy, "not a checkpoint any more");
        expect(statSync(copy).size).to.equal(25);
        await agree(model, wideQ8, "float32", runtime, `${runtime} after the write`);
      } finally {
        await model.dispose();
      }
    });
  }

  it("no lease where the file is open for writing: the weights are read into memory, and the note says why", async () => {
    const copy = join(dir, "open-for-writing.pt");
    copyFileSync(wideQ8, copy);
    const writer = openSync(copy, "r+");
    try {
      const model = await addon.loadLanguageModel(copy, { device: "cpu", extraFiles: ["config.json"], threads: 2 });
      try {
        const choice = await configure(model, "native", "float32");
        expect(choice.note).to.include("weights read into memory (the file is open for writing)");
        await agree(model, wideQ8, "float32", "native", "no lease");
      } finally {
        await model.dispose();
      }
    } finally {
      closeSync(writer);
    }
  });
});
