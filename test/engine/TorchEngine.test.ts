/**
 * TorchEngine on the tiny fixtures, on both runtimes: text equals the Python reference's,
 * streams concatenate to the batch result, cancellation frees the engine, errors are coded,
 * and the event loop keeps turning during a long generation.
 *
 * TEST_DEVICE (default "cpu") runs the device-generic tests on another device, e.g. "cuda"
 * from scripts/gpu-check.sh; there only the TorchScript runtime exists.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { expect } from "chai";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { ByteTokenizer } from "../../src/engine/tokenizer.js";
import { loadAddon } from "../../src/native/binding.js";
import type { KernelFamily } from "../../src/native/types.js";
import type { CompletionChunk, GenerateRequest } from "../../src/types.js";
import { rejection } from "../helpers/rejection.js";
import { fixture, goldenFor } from "../helpers/fixtures.js";
import { withExtraFile } from "../helpers/hfModels.js";

const bytes = new ByteTokenizer();
const request = (prompt: string, extra: Partial<GenerateRequest> = {}): GenerateRequest => ({
  prompt,
  maxNewTokens: 16,
  temperature: 0,
  topK: null,
  ...extra,
});


async function collect(stream: AsyncIterable<string>): Promise<string[]> {
  const pieces: string[] = [];
  for await (const piece of stream) pieces.push(piece);
  return pieces;
}

// The native runtime under every kernel family this CPU can run (SERVICE_KERNELS caps the
// family), so the AVX2 and baseline kernels that hosts without AVX-512 use are tested here too;
// then the TorchScript runtime. Demanding "native" makes the load-time check against the
// checkpoint's TorchScript forward (relative logit difference at most 1e-3) a hard failure.
const device = process.env.TEST_DEVICE ?? "cpu";
const arms: Array<{ runtime: "native" | "torchscript"; kernels?: KernelFamily }> = [
  ...(device === "cpu" ? loadAddon().kernelFamilies.map((kernels) => ({ runtime: "native" as const, kernels })) : []),
  { runtime: "torchscript" },
];

for (const { runtime, kernels } of arms) {
  const label = kernels ? `${runtime} runtime, ${kernels} kernels` : `${runtime} runtime`;
  describe(`TorchEngine (${label})`, function () {
    const golden = goldenFor("tiny-gpt.pt");
    const textCases = golden.cases.filter((c) => c.prompt !== null);
    let engine: TorchEngine;

    before(async () => {
      engine = await TorchEngine.load(fixture("tiny-gpt.pt"), { device, runtime, threads: 2, kernels: kernels ?? "auto" });
    });
    after(() => engine.dispose());

    it(`runs on the ${label}`, () => {
      expect(engine.runtime).to.equal(runtime);
      expect(engine.kernels).to.equal(kernels);
      // The addon reports the device it resolved: "cuda" is the current one, cuda:0.
      expect(engine.device).to.equal(device === "cuda" ? "cuda:0" : device);
      expect(engine.config.contextLength).to.equal(64);
    });

    it("greedy text equals the reference, alone and in one mixed batch", async () => {
      const requests = textCases.map((c) => request(c.prompt!, { maxNewTokens: c.max_new_tokens, temperature: 1e-9 }));
      const expected = textCases.map((c) => bytes.decode(c.output_ids));
      for (let i = 0; i < requests.length; i++) {
        expect(await engine.generateBatch([requests[i]!]), textCases[i]!.name).to.deep.equal([expected[i]]);
      }
      expect(await engine.generateBatch(requests)).to.deep.equal(expected);
    });

    it("streamed pieces concatenate to the batch result and are whole UTF-8", async () => {
      for (const c of textCases) {
        const req = request(c.prompt!, { maxNewTokens: c.max_new_tokens });
        const pieces = await collect(engine.generateStream(req));
        const [whole] = await engine.generateBatch([req]);
        expect(pieces.join(""), c.name).to.equal(whole);
        for (const piece of pieces) {
          expect(piece.length).to.be.greaterThan(0);
          // A piece never ends inside a character: re-encoding it round-trips.
          expect(new TextDecoder().decode(new TextEncoder().encode(piece))).to.equal(piece);
        }
      }
    });

    it("a seeded sampled request gives the same text alone and inside a batch", async () => {
      const seeded = request("Once upon a time", { temperature: 0.9, topK: 20, seed: 42, maxNewTokens: 40 });
      const [alone] = await engine.generateBatch([seeded]);
      const [, inBatch] = await engine.generateBatch([request("other", { temperature: 1.5, seed: 1 }), seeded]);
      expect(inBatch).to.equal(alone);
      const streamed = (await collect(engine.generateStream(seeded))).join("");
      expect(streamed).to.equal(alone);
    });

    it("a stream cancelled after a few pieces stops generating, and the engine is free at once", async () => {
      const before = engine.usage().generatedTokens;
      const controller = new AbortController();
      let pieces = 0;
      for await (const _ of engine.generateStream(request("Cancel me", { maxNewTokens: 512, temperature: 1, seed: 7 }), controller.signal)) {
        if (++pieces === 3) controller.abort();
      }
      // Stopped at the step after the abort reached it: short of the 512 tokens asked for
      // (tokens reach JavaScript asynchronously, so a few more than 3 were made).
      const produced = engine.usage().generatedTokens - before;
      expect(produced).to.be.at.least(3).and.below(512);
      // Breaking out of the loop cancels too.
      const mark = engine.usage().generatedTokens;
      for await (const _ of engine.generateStream(request("Break", { maxNewTokens: 512, temperature: 1, seed: 8 }))) break;
      expect(engine.usage().generatedTokens - mark).to.be.below(512);
      const [next] = await engine.generateBatch([request("Hello, world!")]);
      expect(next).to.equal(bytes.decode(textCases[0]!.output_ids));
    });

    it("a batch row whose signal has already aborted is not run while the others finish", async () => {
      const controller = new AbortController();
      controller.abort();
      const stays = request("stays", { maxNewTokens: 300, temperature: 1, seed: 3 });
      const start = engine.usage().generatedTokens;
      const [alone] = await engine.generateBatch([stays]);
      const between = engine.usage().generatedTokens;
      const outs = await engine.generateBatch([request("gone", { maxNewTokens: 300, signal: controller.signal }), stays]);
      // Not a token for the aborted row (a cancel sent after the job started used to let it run
      // on for as long as the JS thread took to send it: up to all 300 tokens on a cold start).
      expect(outs).to.deep.equal(["", alone]);
      expect(engine.usage().generatedTokens - between).to.equal(between - start);
      // complete() (the /v1 routes) bounds such a row to one token.
      const [completion] = await engine.complete([{ ...request("gone", { maxNewTokens: 300 }), signal: controller.signal }]);
      expect(completion!.choices[0]!.completionTokens).to.be.at.most(1);
    });

    it("keeps the event loop turning during a long generation", async () => {
      let turns = 0;
      let spinning = true;
      const spin = () => {
        turns += 1;
        if (spinning) setImmediate(spin);
      };
      setImmediate(spin);
      const requests = Array.from({ length: 8 }, (_, i) => request(`row ${i}`, { maxNewTokens: 400, temperature: 1, seed: i }));
      await engine.generateBatch(requests);
      spinning = false;
      // A generation that held the JS thread would leave no turns between start and end.
      expect(turns).to.be.greaterThan(20);
    });

    it("a short stream started during a long one joins it and finishes while the long one still runs", async () => {
      const before = engine.usage().generatedTokens;
      const stop = new AbortController();
      const long = engine.generateStream(request("The long one", { maxNewTokens: 1500, temperature: 1, seed: 11 }), stop.signal);
      const iterator = long[Symbol.asyncIterator]();
      await iterator.next(); // the long stream is decoding
      const short = request(textCases[0]!.prompt!, { maxNewTokens: textCases[0]!.max_new_tokens });
      const text = (await collect(engine.generateStream(short))).join("");
      expect(text).to.equal(bytes.decode(textCases[0]!.output_ids));
      stop.abort();
      while (!(await iterator.next()).done);
      // Had the short one waited in line, the long one would have made all its 1,500 tokens.
      const produced = engine.usage().generatedTokens - before - textCases[0]!.output_ids.length;
      expect(produced, "tokens of the long stream").to.be.below(1500);
    });

    it("prompts fed in small chunks give the reference's greedy text, alone, batched and concurrent", async () => {
      const chunked = await TorchEngine.load(fixture("tiny-gpt.pt"), { device, runtime, threads: 2, kernels: kernels ?? "auto", stepTokens: 3 });
      try {
        const requests = textCases.map((c) => request(c.prompt!, { maxNewTokens: c.max_new_tokens, temperature: 1e-9 }));
        const expected = textCases.map((c) => bytes.decode(c.output_ids));
        expect(await chunked.generateBatch(requests)).to.deep.equal(expected);
        expect(await Promise.all(requests.map(async (r) => (await chunked.generateBatch([r]))[0]))).to.deep.equal(expected);
      } finally {
        await chunked.dispose();
      }
    });

    it("counts prompt and generated tokens", async () => {
      const before = engine.usage();
      await engine.generateBatch([request("abc", { maxNewTokens: 5 }), request("de", { maxNewTokens: 3 })]);
      const after = engine.usage();
      expect(after.promptTokens - before.promptTokens).to.equal(5);
      expect(after.generatedTokens - before.generatedTokens).to.equal(8);
    });

    it("reports the prompt tokens the prefix cache served, whole and on every choice's last chunk, and counts them", async () => {
      const prompt = "A prompt the cache keeps for later use. ";
      const ask = (text: string, n = 1) => ({ prompt: text, maxNewTokens: 4, temperature: 0, topK: null, n });
      const before = engine.usage();
      const [first] = await engine.complete([ask(prompt)]);
      const [second] = await engine.complete([ask(prompt)]);
      expect(first!.cachedPromptTokens).to.equal(0);
      expect(second!.cachedPromptTokens).to.equal(prompt.length - 1);
      expect(second!.choices[0]!.text).to.equal(first!.choices[0]!.text);
      const last: CompletionChunk[] = [];
      for await (const chunk of engine.completeStream(ask(`${prompt}More.`, 2))) if (chunk.finishReason) last.push(chunk);
      expect(last).to.have.length(2);
      for (const chunk of last) expect(chunk.cachedPromptTokens).to.be.at.least(prompt.length);
      const after = engine.usage();
      expect(after.prefixCacheHitTokens! - before.prefixCacheHitTokens!).to.equal(prompt.length - 1 + last[0]!.cachedPromptTokens!);
      expect(after.prefixCacheQueriedTokens! - before.prefixCacheQueriedTokens!).to.equal(3 * prompt.length + "More.".length);
    });
  });
}

describe("TorchEngine stops and checkpoints", () => {
  it("stops a row at end-of-sequence (not part of the text)", async () => {
    const golden = goldenFor("tiny-gpt-eos.pt");
    const engine = await TorchEngine.load(fixture("tiny-gpt-eos.pt"));
    try {
      for (const c of golden.cases.filter((x) => x.prompt !== null)) {
        const before = engine.usage().generatedTokens;
        const [text] = await engine.generateBatch([request(c.prompt!, { maxNewTokens: c.max_new_tokens })]);
        expect(text, c.name).to.equal(bytes.decode(c.output_ids));
        const produced = engine.usage().generatedTokens - before;
        expect(produced, c.name).to.equal(c.output_ids.length);
        if (c.stopped_on_eos) expect(produced, c.name).to.be.below(c.max_new_tokens);
      }
    } finally {
      await engine.dispose();
    }
  });

  it("serves a checkpoint with a Hugging Face tokenizer.json", async () => {
    const golden = goldenFor("tiny-gpt-hf.pt");
    const engine = await TorchEngine.load(fixture("tiny-gpt-hf.pt"));
    try {
      expect(engine.tokenizer.kind).to.equal("huggingface");
      // Cases whose ids are what BPE makes of their own text can go in as text (the others are
      // checked id by id in the addon tests).
      const asText = golden.cases.filter(
        (c) => JSON.stringify(engine.encodePrompt(engine.tokenizer.decode(c.prompt_ids))) === JSON.stringify(c.prompt_ids),
      );
      expect(asText.map((c) => c.name)).to.include.members(["hf-short", "hf-one-token"]);
      for (const c of asText) {
        const prompt = engine.tokenizer.decode(c.prompt_ids);
        const [text] = await engine.generateBatch([request(prompt, { maxNewTokens: c.max_new_tokens })]);
        expect(text, c.name).to.equal(engine.tokenizer.decode(c.output_ids));
        const streamed = (await collect(engine.generateStream(request(prompt, { maxNewTokens: c.max_new_tokens })))).join("");
        expect(streamed, c.name).to.equal(text);
      }
    } finally {
      await engine.dispose();
    }
  });

  it("two engines and concurrent batch and stream calls do not interfere", async () => {
    const plain = goldenFor("tiny-gpt.pt").cases.filter((c) => c.prompt !== null);
    const eos = goldenFor("tiny-gpt-eos.pt").cases.filter((c) => c.prompt !== null);
    const [a, b] = await Promise.all([TorchEngine.load(fixture("tiny-gpt.pt")), TorchEngine.load(fixture("tiny-gpt-eos.pt"))]);
    try {
      const run = (engine: TorchEngine, cases: typeof plain) =>
        cases.map(async (c) => {
          const req = request(c.prompt!, { maxNewTokens: c.max_new_tokens });
          const [batch, stream] = await Promise.all([engine.generateBatch([req]), collect(engine.generateStream(req))]);
          return [batch![0], stream.join("")];
        });
      const results = await Promise.all([...run(a, plain), ...run(b, eos)]);
      const expected = [...plain, ...eos].map((c) => bytes.decode(c.output_ids));
      results.forEach(([batch, stream], i) => {
        expect(batch).to.equal(expected[i]);
        expect(stream).to.equal(expected[i]);
      });
    } finally {
      await Promise.all([a.dispose(), b.dispose()]);
    }
  });

  it("work submitted before dispose finishes; later calls reject ERR_DISPOSED", async () => {
    const engine = await TorchEngine.load(fixture("tiny-gpt.pt"));
    const running = engine.generateBatch([request("x", { maxNewTokens: 200, temperature: 1, seed: 1 })]);
    await Promise.all([engine.dispose(), engine.dispose()]);
    expect((await running)[0]!.length).to.be.greaterThan(0);
    expect((await rejection(engine.generateBatch([request("y")]))).code).to.equal("ERR_DISPOSED");
    expect((await rejection(collect(engine.generateStream(request("y"))))).code).to.equal("ERR_DISPOSED");
  });

  it("each broken checkpoint is a coded error naming the problem", async () => {
    const cases: [string, string, RegExp][] = [
      ["does-not-exist.pt", "ERR_CHECKPOINT_NOT_FOUND", /not found/],
      ["broken/truncated.pt", "ERR_CHECKPOINT_INVALID", /truncated|readable/],
      ["broken/corrupt.pt", "ERR_CHECKPOINT_INVALID", /sha256/],
      ["broken/no-cache-shape.pt", "ERR_CHECKPOINT_INTERFACE", /cache_shape/],
      ["broken/bad-version.pt", "ERR_CHECKPOINT_INTERFACE", /version 99/],
      ["broken/no-config.pt", "ERR_CHECKPOINT_INTERFACE", /config\.json/],
    ];
    for (const [file, code, words] of cases) {
      const err = await rejection(TorchEngine.load(fixture(file)));
      expect(err.code, file).to.equal(code);
      expect(err.message, file).to.match(words);
    }
  });

  it("refuses a checkpoint whose tokenizer.json is not usable (built while the addon configures), then loads the next", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bad-tokenizer-"));
    try {
      const broken = withExtraFile(fixture("tiny-gpt-hf.pt"), join(dir, "bad-tokenizer.pt"), "tokenizer.json", "{not json");
      const err = await rejection(TorchEngine.load(broken));
      expect(err.code).to.equal("ERR_CHECKPOINT_INTERFACE");
      expect(err.message).to.match(/tokenizer\.json is not a usable tokenizer\.json/);
      const engine = await TorchEngine.load(fixture("tiny-gpt-hf.pt"));
      try {
        const [text] = await engine.generateBatch([request("hello", { maxNewTokens: 2 })]);
        expect(text).to.be.a("string");
      } finally {
        await engine.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
