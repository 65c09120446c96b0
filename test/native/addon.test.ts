/**
 * The raw addon against the tiny fixtures: greedy outputs equal the Python reference's
 * token for token, alone and in mixed batches, and every failure is a coded, catchable error.
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { loadAddon } from "../../src/native/binding.js";
import type { RawAddon, RawGenerateRow, RawLanguageModel } from "../../src/native/types.js";
import { rejection } from "../helpers/rejection.js";
import { fixture, goldenFor, repoRoot, type GoldenCase } from "../helpers/fixtures.js";
import { settledThreads } from "../helpers/threads.js";

const greedy = (c: GoldenCase): RawGenerateRow => ({
  tokens: Int32Array.from(c.prompt_ids),
  maxNewTokens: c.max_new_tokens,
  sampling: { temperature: 0, topK: 0, seed: -1 },
});


describe("native addon", function () {
  let addon: RawAddon;
  before(() => {
    addon = loadAddon();
  });

  it("reports the libtorch it was built against", () => {
    expect(addon.torchVersion).to.match(/^\d+\.\d+/);
    expect(addon.cudaAvailable()).to.be.a("boolean");
    expect(addon.cudaDeviceCount()).to.be.a("number");
  });

  it("offers every kernel family the CPU can run, so the suite exercises each", () => {
    // /proc/cpuinfo is the independent witness: a detection bug must not quietly drop a family.
    const flags = new Set((readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:(.*)$/m)?.[1] ?? "").trim().split(/\s+/));
    const avx512 = ["avx512f", "avx512dq", "avx512bw", "avx512vl"].every((f) => flags.has(f));
    // amx also needs the kernel's leave to use the tiles (granted on every Linux since 5.16).
    const expected = [
      ...(avx512 && flags.has("avx512_bf16") && flags.has("amx_tile") && flags.has("amx_int8") ? ["amx"] : []),
      ...(avx512 && flags.has("avx512_bf16") ? ["avx512_bf16"] : []),
      ...(avx512 ? ["avx512"] : []),
      ...(flags.has("avx2") && flags.has("fma") && flags.has("f16c") ? ["avx2"] : []),
      "baseline",
    ];
    expect(addon.kernelFamilies).to.deep.equal(expected);
    expect(addon.nativeArchitectures).to.include.members(["gpt", "llama"]);
  });

  describe("which runtime \"auto\" serves with", () => {
    it("serves the native runtime untimed on the AVX-512 and AVX2 families, and says why", () => {
      for (const family of ["amx", "avx512_bf16", "avx512", "avx2"] as const) {
        const verdict = addon.decideRuntime(family);
        expect(verdict.timed, family).to.equal(false);
        expect(verdict.runtime, family).to.equal("native");
        expect(verdict.reason).to.include(`${family} kernels`);
      }
    });

    it("times both runtimes on the baseline family and serves TorchScript only when it is clearly faster", () => {
      expect(addon.decideRuntime("baseline").timed).to.equal(true);
      const faster = addon.decideRuntime("baseline", 0.010, 0.005);
      expect(faster.runtime).to.equal("torchscript");
      expect(faster.reason).to.include("10.0 ms native (baseline kernels), 5.0 ms TorchScript");
      // Within the margin (timings at load move with the machine's load), native keeps serving.
      expect(addon.decideRuntime("baseline", 0.010, 0.009).runtime).to.equal("native");
      expect(addon.decideRuntime("baseline", 0.005, 0.010).runtime).to.equal("native");
      // A TorchScript run stopped once it could no longer be chosen: native, and the note says so.
      const stopped = addon.decideRuntime("baseline", 0.010, 0.0085, true);
      expect(stopped.runtime).to.equal("native");
      expect(stopped.reason).to.include("TorchScript was stopped 8.5 ms into a run of it");
    });

    it("on a real load, applies the rule for the family it runs and names it in the note", async () => {
      const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      try {
        const settings = { contextLength: 64, architecture: "gpt", modelConfig: { n_layer: 2 } };
        for (const family of addon.kernelFamilies) {
          const choice = await model.configure({ ...settings, runtime: "auto", kernels: family });
          if (family === "baseline") {
            // Either runtime may win the timing; the note must give both figures (or where the
            // TorchScript run stopped, once it could no longer win: native then), and the
            // kernels are reported only when the native runtime serves.
            expect(choice.note).to.match(
              /a short workload took [\d.]+ ms native \(baseline kernels\)(, [\d.]+ ms TorchScript|; TorchScript was stopped [\d.]+ ms into a run of it)/,
            );
            if (choice.note!.includes("stopped")) expect(choice.runtime).to.equal("native");
            expect(choice.kernels).to.equal(choice.runtime === "native" ? "baseline" : undefined);
          } else {
            expect(choice.runtime).to.equal("native");
            expect(choice.note).to.include(`${family} kernels`);
          }
        }
        const asked = await model.configure({ ...settings, runtime: "torchscript" });
        expect(asked.note).to.include("asked for");
      } finally {
        await model.dispose();
      }
    });
  });

  it("runs natively exactly the architectures the table marks native (python/torchserve_node/architectures.json)", () => {
    // The exporter reads the same table: an architecture it writes and the registry in
    // native/steppers/NativeRegistry.h must not drift apart.
    const table = JSON.parse(readFileSync(join(repoRoot, "python", "torchserve_node", "architectures.json"), "utf8")) as {
      architectures: Record<string, { native: boolean }>;
    };
    const native = Object.entries(table.architectures).filter(([, entry]) => entry.native).map(([name]) => name);
    expect([...addon.nativeArchitectures].sort()).to.deep.equal(native.sort());
  });

  it("rejects an unknown kernel family or dtype at configure", async () => {
    const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
    try {
      const kernels = await rejection(model.configure({ contextLength: 64, kernels: "sse" as never }));
      expect(kernels.code).to.equal("ERR_INVALID_ARGUMENT");
      expect(kernels.message).to.include("kernels");
      const dtype = await rejection(model.configure({ contextLength: 64, dtype: "int8" as never }));
      expect(dtype.code).to.equal("ERR_INVALID_ARGUMENT");
      expect(dtype.message).to.include("dtype");
    } finally {
      await model.dispose();
    }
  });

  for (const name of ["tiny-gpt.pt", "tiny-gpt-eos.pt", "tiny-gpt-hf.pt"]) {
    describe(name, () => {
      const golden = goldenFor(name);
      let model: RawLanguageModel;
      before(async () => {
        model = await addon.loadLanguageModel(fixture(name), { device: "cpu", extraFiles: ["config.json"], threads: 1 });
        await model.configure({
          contextLength: golden.config.block_size,
          eosTokenIds: golden.config.tokenizer.eos_token_id === null ? [] : [golden.config.tokenizer.eos_token_id],
        });
      });
      after(() => model.dispose());

      for (const c of golden.cases) {
        it(`greedy "${c.name}" alone matches the reference`, async () => {
          const [out] = await model.generate([greedy(c)], null).result;
          expect(Array.from(out!)).to.deep.equal(c.output_ids);
        });
      }

      it("the same continuations come out of one mixed batch (padding and masks are right)", async () => {
        const cases = golden.batch_order.map((n) => golden.cases.find((c) => c.name === n)!);
        const outs = await model.generate(cases.map(greedy), null).result;
        expect(outs.map((o) => Array.from(o))).to.deep.equal(cases.map((c) => c.output_ids));
      });

      it("streams every token, in order, before the result settles", async () => {
        const c = golden.cases.find((x) => x.output_ids.length > 3)!;
        const streamed: number[][] = [[], []];
        const generation = model.generate([greedy(c), greedy(c)], (pairs) => {
          for (let i = 0; i < pairs.length; i += 2) streamed[pairs[i]!]!.push(pairs[i + 1]!);
        });
        const outs = await generation.result;
        expect(streamed[0]).to.deep.equal(c.output_ids);
        expect(streamed[1]).to.deep.equal(Array.from(outs[1]!));
      });
    });
  }

  for (const runtime of ["native", "torchscript"] as const)
  describe(`sampling (${runtime} runtime)`, () => {
    let model: RawLanguageModel;
    const golden = goldenFor("tiny-gpt.pt");
    const prompt = Int32Array.from(golden.cases[0]!.prompt_ids);
    before(async () => {
      model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      // No end-of-sequence here: sampled rows must run to their limits.
      await model.configure({ contextLength: 64, eosTokenIds: [], runtime, architecture: "gpt" });
    });
    after(() => model.dispose());

    it("a seeded row gives the same tokens alone and inside any batch", async () => {
      const row = { tokens: prompt, maxNewTokens: 40, sampling: { temperature: 1, topK: 5, seed: 1234 } };
      const [alone] = await model.generate([row], null).result;
      const batch = await model.generate(
        [{ ...row, sampling: { topK: 0, temperature: 0.7, seed: 9 } }, row, { ...row, sampling: { ...row.sampling, temperature: 0 } }],
        null,
      ).result;
      expect(Array.from(batch[1]!)).to.deep.equal(Array.from(alone!));
    });

    it("top_k keeps each row's own k most likely tokens, even beside a row with no top_k", async () => {
      // With top_k = 1 sampling must equal greedy, whatever the temperature and seed.
      const c = golden.cases[0]!;
      const outs = await model.generate(
        [
          { ...greedy(c), sampling: { temperature: 5, topK: 1, seed: 3 } },
          { ...greedy(c), sampling: { temperature: 1, topK: 0, seed: 4 } },
        ],
        null,
      ).result;
      expect(Array.from(outs[0]!)).to.deep.equal(c.output_ids);
    });

    it("treats a temperature of 1e-9 as greedy and top_k beyond the vocabulary as all of it", async () => {
      const c = golden.cases[0]!;
      const [tiny] = await model.generate([{ ...greedy(c), sampling: { temperature: 1e-9, topK: 100000, seed: 5 } }], null).result;
      expect(Array.from(tiny!)).to.deep.equal(c.output_ids);
      const [hot] = await model.generate([{ ...greedy(c), sampling: { temperature: 5, topK: 100000, seed: 5 } }], null).result;
      expect(hot!.length).to.equal(c.max_new_tokens);
      for (const id of hot!) expect(id).to.be.within(0, 258);
    });

    it("a cancelled row stops at the next step while the others finish", async () => {
      // The rows must still decode when the callback's cancel arrives: the native runtime decodes
      // tiny-gpt's 400 tokens in a few milliseconds, less than a busy event loop (a loaded CI
      // host) can take to deliver the third token (it failed so in a clean-clone run), so its
      // rows are 100,000 tokens long (about a second).
      const limit = runtime === "native" ? 100_000 : 400;
      const long = { tokens: prompt, maxNewTokens: limit, sampling: { temperature: 1, topK: 0, seed: 1 } };
      let seen = 0;
      const generation = model.generate([long, long], (pairs) => {
        for (let i = 0; i < pairs.length; i += 2) {
          if (pairs[i] === 0 && ++seen === 3) generation.cancel(0);
        }
      });
      const [first, second] = await generation.result;
      expect(first!.length).to.be.below(limit);
      expect(second!.length).to.equal(limit);
    });
  });

  describe("continuous batching", () => {
    const golden = goldenFor("tiny-gpt.pt");
    for (const runtime of ["native", "torchscript"] as const) {
      it(`every golden case as its own concurrent job still matches the reference (${runtime})`, async () => {
        const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
        try {
          const chosen = await model.configure({ contextLength: 64, eosTokenIds: [257], runtime, architecture: "gpt" });
          expect(chosen.runtime).to.equal(runtime);
          const outs = await Promise.all(golden.cases.map((c) => model.generate([greedy(c)], null).result));
          expect(outs.map(([o]) => Array.from(o!))).to.deep.equal(golden.cases.map((c) => c.output_ids));
        } finally {
          await model.dispose();
        }
      });
    }

    for (const runtime of ["native", "torchscript"] as const)
    it(`a job submitted while another decodes joins it and finishes first (${runtime} runtime)`, async () => {
      const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      try {
        await model.configure({ contextLength: 64, eosTokenIds: [], runtime, architecture: "gpt" });
        let longDone = false;
        let started!: () => void;
        const firstToken = new Promise<void>((resolve) => (started = resolve));
        // The short job must arrive while the long one decodes: 500 tokens take the TorchScript
        // runtime ~70 ms here but the native one ~4 ms, less than a busy event loop can take to
        // submit the short job, so the native arm decodes 10,000 (~75 ms).
        const longTokens = runtime === "native" ? 10_000 : 500;
        const long = model.generate([{ tokens: Int32Array.of(65, 66), maxNewTokens: longTokens, sampling: { temperature: 1, topK: 0, seed: 1 } }], () => started());
        long.result.then(() => (longDone = true), () => {});
        await firstToken;
        const c = golden.cases[0]!;
        const [short] = await model.generate([greedy(c)], null).result;
        expect(longDone, "the short job waited for the long one").to.equal(false);
        expect(Array.from(short!)).to.deep.equal(c.output_ids);
        const [longOut] = await long.result;
        expect(longOut!.length).to.equal(longTokens);
      } finally {
        await model.dispose();
      }
    });
  });

  describe("chunked prefill and admission", () => {
    const golden = goldenFor("tiny-gpt.pt");
    // A row with a short prompt decoding beside a row whose prompt fills most of the context,
    // in one job: the (row, token) pairs arrive in the order the steps made them.
    async function tokensBeforeLongOnesFirst(runtime: "native" | "torchscript", stepTokens: number): Promise<number> {
      const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      try {
        await model.configure({ contextLength: 64, eosTokenIds: [], runtime, architecture: "gpt", stepTokens });
        const long = Int32Array.from({ length: 60 }, (_, i) => 97 + (i % 26));
        let running = 0;
        let seen = -1;
        const generation = model.generate(
          [
            { tokens: Int32Array.of(72, 105), maxNewTokens: 40, sampling: { temperature: 0, topK: 0, seed: -1 } },
            { tokens: long, maxNewTokens: 2, sampling: { temperature: 0, topK: 0, seed: -1 } },
          ],
          (pairs) => {
            for (let i = 0; i < pairs.length; i += 2) {
              if (pairs[i] === 0) running += 1;
              else if (seen < 0) seen = running;
            }
          },
        );
        await generation.result;
        return seen;
      } finally {
        await model.dispose();
      }
    }

    for (const runtime of ["native", "torchscript"] as const) {
      it(`a long prompt is fed in chunks while a running row keeps decoding, one token a step (${runtime})`, async () => {
        // Budget 8: the running row's token plus 7 prompt tokens a step, so the 60-token
        // prompt takes 9 steps (the first shares its budget with the short prompt) and the
        // running row makes a token in each but the first... and the last, which ends both.
        expect(await tokensBeforeLongOnesFirst(runtime, 8)).to.be.at.least(7);
        // Unchunked, the long prompt goes in at the first step: both rows' first tokens come together.
        expect(await tokensBeforeLongOnesFirst(runtime, 0)).to.equal(1);
      });

      it(`chunked prefill gives the unchunked greedy tokens, batched and as concurrent jobs (${runtime})`, async () => {
        for (const stepTokens of [1, 5]) {
          const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
          try {
            await model.configure({ contextLength: 64, eosTokenIds: [257], runtime, architecture: "gpt", stepTokens });
            const batch = await model.generate(golden.cases.map(greedy), null).result;
            expect(batch.map((o) => Array.from(o)), `stepTokens ${stepTokens}`).to.deep.equal(golden.cases.map((c) => c.output_ids));
            const jobs = await Promise.all(golden.cases.map((c) => model.generate([greedy(c)], null).result));
            expect(jobs.map(([o]) => Array.from(o!))).to.deep.equal(golden.cases.map((c) => c.output_ids));
          } finally {
            await model.dispose();
          }
        }
      });
    }

    it("a negative step budget or cache budget is a clear error", async () => {
      const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 1 });
      try {
        const bad = await rejection(model.configure({ contextLength: 64, stepTokens: -1 }));
        expect(bad.code).to.equal("ERR_INVALID_ARGUMENT");
        expect(bad.message).to.match(/stepTokens/);
        const budget = await rejection(model.configure({ contextLength: 64, kvBudgetMb: -5 }));
        expect(budget.message).to.match(/kvBudgetMb/);
      } finally {
        await model.dispose();
      }
    });
  });

  describe("errors", () => {
    const load = (file: string, device = "cpu") => addon.loadLanguageModel(file, { device, extraFiles: ["config.json"] });

    it("a missing file is ERR_CHECKPOINT_NOT_FOUND", async () => {
      const err = await rejection(load(fixture("does-not-exist.pt")));
      expect(err.code).to.equal("ERR_CHECKPOINT_NOT_FOUND");
    });

    it("a truncated file is ERR_CHECKPOINT_INVALID", async () => {
      const err = await rejection(load(fixture("broken/truncated.pt")));
      expect(err.code).to.equal("ERR_CHECKPOINT_INVALID");
      expect(err.message).to.include("truncated.pt");
    });

    it("a module without cache_shape, another interface version, or no config.json is ERR_CHECKPOINT_INTERFACE", async () => {
      for (const [file, words] of [
        ["broken/no-cache-shape.pt", "cache_shape"],
        ["broken/bad-version.pt", "version 99"],
        ["broken/no-config.pt", "config.json"],
      ] as const) {
        const err = await rejection(load(fixture(file)));
        expect(err.code, file).to.equal("ERR_CHECKPOINT_INTERFACE");
        expect(err.message, file).to.include(words);
      }
    });

    it("cuda on a CPU-only build, a GPU that is not there, or an unknown device is ERR_DEVICE with the fix", async () => {
      if (addon.cudaAvailable()) {
        const model = await load(fixture("tiny-gpt.pt"), "cuda");
        expect(model.device).to.equal("cuda:0");
        await model.dispose();
      } else {
        const cuda = await rejection(load(fixture("tiny-gpt.pt"), "cuda"));
        expect(cuda.code).to.equal("ERR_DEVICE");
        expect(cuda.message).to.match(/CPU-only libtorch|no CUDA GPU/);
      }
      const absent = await rejection(load(fixture("tiny-gpt.pt"), `cuda:${addon.cudaDeviceCount() + 7}`));
      expect(absent.code).to.equal("ERR_DEVICE");
      const unknown = await rejection(load(fixture("tiny-gpt.pt"), "gpu:0"));
      expect(unknown.code).to.equal("ERR_DEVICE");
      expect(unknown.message).to.include('"cpu", "cuda" or "cuda:N"');
    });

    it("bad arguments reject (never throw) with ERR_INVALID_ARGUMENT", async () => {
      const model = await load(fixture("tiny-gpt.pt"));
      try {
        const beforeConfigure = await rejection(model.generate([{ tokens: Int32Array.of(1), maxNewTokens: 1, sampling: { temperature: 0, topK: 0, seed: -1 } }], null).result);
        expect(beforeConfigure.code).to.equal("ERR_INVALID_ARGUMENT");
        await model.configure({ contextLength: 64, eosTokenIds: [257] });
        const empty = await rejection(model.generate([], null).result);
        expect(empty.code).to.equal("ERR_INVALID_ARGUMENT");
        const noTokens = await rejection(model.generate([{ tokens: new Int32Array(0), maxNewTokens: 1, sampling: { temperature: 0, topK: 0, seed: -1 } }], null).result);
        expect(noTokens.code).to.equal("ERR_INVALID_ARGUMENT");
        const noMethod = await rejection(model.run("no_such_method", []));
        expect(noMethod.code).to.equal("ERR_INVALID_ARGUMENT");
      } finally {
        await model.dispose();
      }
    });
  });

  describe("lifecycle", () => {
    it("a process that exits while a worker thread still loads the addon exits with its own code", () => {
      // npm start preloads the addon on a worker thread, and a bad configuration exits at once:
      // an error raised in the worker's shutting-down environment once aborted the process.
      const binding = join(repoRoot, "dist", "src", "native", "binding.js");
      const dir = mkdtempSync(join(tmpdir(), "tsn-exit-"));
      try {
        for (const delayMs of [0, 50, 150, 300]) {
          // A module file: under -e the worker's load did not overlap the exit.
          const script = join(dir, `exit-${delayMs}.mjs`);
          writeFileSync(script, `import { preloadAddon } from ${JSON.stringify(binding)};\nvoid preloadAddon();\nsetTimeout(() => process.exit(2), ${delayMs});\n`);
          const run = spawnSync(process.execPath, [script], { encoding: "utf8" });
          expect({ status: run.status, signal: run.signal }, `${delayMs} ms: ${run.stderr}`).to.deep.equal({ status: 2, signal: null });
          expect(run.stderr, `${delayMs} ms`).to.not.include("terminate called");
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("leaks no handles or threads over load / generate / dispose cycles", async () => {
      const cycle = async () => {
        const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu", threads: 2 });
        // The native runtime, so its compute team (a worker thread at threads: 2) is covered too.
        const { runtime } = await model.configure({ contextLength: 64, eosTokenIds: [257], architecture: "gpt" });
        expect(runtime).to.equal("native");
        await model.generate([{ tokens: Int32Array.of(65), maxNewTokens: 5, sampling: { temperature: 0, topK: 0, seed: -1 } }], () => {}).result;
        await model.dispose();
      };
      await cycle(); // libuv's pool and libtorch's own threads start on first use
      const resourcesBefore = process.getActiveResourcesInfo().length;
      const threadsBefore = await settledThreads();
      for (let i = 0; i < 10; i++) await cycle();
      expect(process.getActiveResourcesInfo().length).to.equal(resourcesBefore);
      expect(await settledThreads()).to.equal(threadsBefore);
    });

    it("runs any exported method off the JS thread", async () => {
      const model = await addon.loadModule(fixture("tiny-gpt.pt"), { device: "cpu" });
      try {
        expect(await model.run("cache_shape", [3])).to.deep.equal([2, 2, 3, 2, 64, 16]);
        expect(await model.run("interface_version", [])).to.equal(1);
      } finally {
        await model.dispose();
      }
    });

    it("dispose lets submitted work finish, rejects later calls, and is idempotent", async () => {
      const model = await addon.loadLanguageModel(fixture("tiny-gpt.pt"), { device: "cpu" });
      await model.configure({ contextLength: 64, eosTokenIds: [] });
      const row = { tokens: Int32Array.of(65), maxNewTokens: 300, sampling: { temperature: 1, topK: 0, seed: 1 } };
      let started = false;
      const running = model.generate([row], () => {
        started = true;
      });
      // Wait until the first job is on the inference thread, then queue a second one.
      while (!started) await new Promise((resolve) => setImmediate(resolve));
      const queued = model.generate([row], null);
      const disposed = Promise.all([model.dispose(), model.dispose()]);
      const afterDispose = rejection(model.generate([row], null).result);
      const [out] = await running.result;
      expect(out!.length).to.equal(300);
      const [queuedOut] = await queued.result;
      expect(queuedOut!.length).to.equal(300);
      expect((await afterDispose).code).to.equal("ERR_DISPOSED");
      await disposed;
      await model.dispose();
      expect((await rejection(model.run("interface_version", []))).code).to.equal("ERR_DISPOSED");
      expect((await rejection(model.generate([row], null).result)).code).to.equal("ERR_DISPOSED");
    });
  });
});
