/**
 * export_gguf.py writes the same weights llama.cpp runs: tiny random models of every kind
 * (Llama with GQA and a SentencePiece tokenizer, Llama 3 rope scaling with a tied head, Qwen2
 * biases, Mistral, GPT-2), exported to float32 checkpoints and to GGUF f32, generate the same
 * greedy tokens through llama.cpp (node-llama-cpp's prebuilt CPU build, in a child process so
 * its libraries never share a process with libtorch) as through python/torchserve_node/reference.py,
 * and llama.cpp tokenizes text as the project's tokenizer does.
 *
 * Both run float32 on the same weights, but llama.cpp's kernels differ from libtorch's (its
 * GPT-2 GELU goes through a float16 table): tokens are compared up to the first step whose
 * reference top-1/top-2 margin is below 0.05 logits, and at least 30 tokens per model must be
 * compared (34 to 48 of the 48 are; all 48 agreed on the machine this was written on).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { HuggingFaceTokenizer } from "../../src/engine/tokenizer.js";
import { exportGgufFixtures, type HfCheckpoints, referenceGreedy } from "../helpers/hfModels.js";
import { repoRoot } from "../helpers/fixtures.js";

const NAMES = ["llama-gqa", "llama3-bf16", "qwen2", "mistral", "gpt2"];
const PROMPTS = [[10, 20, 30, 40], [50, 60], [7], [100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115]];
const TEXTS = ["the cat sat on the mat", "hello world, héllo ☃ 😀", "  two  spaces\nand a line"];
const MAX_NEW = 12;
const MIN_MARGIN = 0.05;

interface LlamaCppResult {
  outputs: number[][];
  tokens: number[][];
}

/** llama.cpp's greedy continuations of PROMPTS for each GGUF (test/helpers/llamacpp_greedy.mjs, its own process). */
function llamaCppGreedy(dir: string, names: readonly string[], texts: readonly string[]): LlamaCppResult[] {
  const jobs = names.map((name) => ({ gguf: join(dir, `${name}.gguf`), prompts: PROMPTS, maxNewTokens: MAX_NEW, texts }));
  const jobsFile = join(dir, "jobs.json");
  writeFileSync(jobsFile, JSON.stringify(jobs));
  const result = spawnSync(process.execPath, [join(repoRoot, "test", "helpers", "llamacpp_greedy.mjs"), jobsFile], {
    cwd: repoRoot,
    encoding: "utf8",
    maxBuffer: 16 * 1024 * 1024,
  });
  expect(result.status, `${result.stdout}\n${result.stderr}`).to.equal(0);
  return JSON.parse(result.stdout.trim().split("\n").pop()!) as LlamaCppResult[];
}

/**
 * llama.cpp's tokens equal the reference's up to the first near-tie (or the first `stopAt`
 * id, where llama.cpp ends and the reference need not), and at least 30 per model are compared.
 */
function expectSameGreedy(fixtures: HfCheckpoints, names: readonly string[], llamaCpp: LlamaCppResult[], stopAt?: number): void {
  const reference = referenceGreedy(names.map((name) => ({ checkpoint: fixtures.path(name), prompts: PROMPTS, maxNewTokens: MAX_NEW })));
  names.forEach((name, i) => {
    let compared = 0;
    PROMPTS.forEach((prompt, p) => {
      const ref = reference[i]![p]!;
      let k = ref.margins.findIndex((m) => m < MIN_MARGIN);
      if (k < 0) k = ref.output_ids.length;
      const stop = stopAt === undefined ? -1 : ref.output_ids.indexOf(stopAt);
      if (stop >= 0) k = Math.min(k, stop);
      expect(llamaCpp[i]!.outputs[p]!.slice(0, k), `${name} prompt ${prompt.slice(0, 4)}`).to.deep.equal(ref.output_ids.slice(0, k));
      compared += k;
    });
    expect(compared, `${name}: tokens compared`).to.be.at.least(30);
  });
}

describe("export_gguf.py: llama.cpp runs the same weights", function () {
  this.timeout(180000);
  let fixtures: HfCheckpoints;
  let llamaCpp: LlamaCppResult[];

  before(() => {
    fixtures = exportGgufFixtures(NAMES);
    llamaCpp = llamaCppGreedy(fixtures.dir, NAMES, TEXTS);
  });
  after(() => fixtures?.cleanup());

  it("greedy tokens through llama.cpp equal the reference loop's on every model", () => {
    expectSameGreedy(fixtures, NAMES, llamaCpp);
  });

  it("llama.cpp tokenizes text as the project's tokenizer does (byte-level BPE and SentencePiece)", () => {
    NAMES.forEach((name, i) => {
      const tokenizer = new HuggingFaceTokenizer(JSON.parse(readFileSync(join(fixtures.dir, name, "tokenizer.json"), "utf8")));
      TEXTS.forEach((text, t) => {
        expect(llamaCpp[i]!.tokens[t], `${name} ${JSON.stringify(text)}`).to.deep.equal(tokenizer.encode(text));
      });
    });
  });
});

describe("export_gguf.py --vocabulary ids: a placeholder vocabulary for models fed token ids", function () {
  this.timeout(180000);
  // Both architectures the benchmark writes this way (scripts/bench/make_bench_models.py).
  const names = ["llama-gqa", "gpt2"];
  let fixtures: HfCheckpoints;

  before(() => {
    fixtures = exportGgufFixtures(names, "ids");
  });
  after(() => fixtures?.cleanup());

  it("llama.cpp loads it and generates the reference loop's greedy tokens (</s>, id 2, ends its run)", () => {
    expectSameGreedy(fixtures, names, llamaCppGreedy(fixtures.dir, names, []), 2);
  });
});
