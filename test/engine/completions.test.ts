/**
 * TorchEngine's completions on the tiny fixture, on both runtimes: n choices sharing one
 * prefill (the copied cache rows must decode exactly like a computed prefill), stop
 * sequences, log-probabilities, and the sampling filters at their limits.
 */
import { expect } from "chai";

import { TorchEngine } from "../../src/engine/TorchEngine.js";
import type { CompletionChunk, CompletionRequest } from "../../src/types.js";
import { fixture } from "../helpers/fixtures.js";

const request = (prompt: string, extra: Partial<CompletionRequest> = {}): CompletionRequest => ({
  prompt,
  maxNewTokens: 24,
  temperature: 0,
  topK: null,
  ...extra,
});

async function collect(stream: AsyncIterable<CompletionChunk>): Promise<CompletionChunk[]> {
  const chunks: CompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

for (const runtime of ["native", "torchscript"] as const) {
  describe(`TorchEngine completions (${runtime} runtime)`, function () {
    let engine: TorchEngine;

    before(async () => {
      engine = await TorchEngine.load(fixture("tiny-gpt.pt"), { runtime, threads: 2 });
    });
    after(() => engine.dispose());

    it("n greedy choices share one prefill and each equals the request alone", async () => {
      const [alone] = await engine.generateBatch([request("Hello there")]);
      // Beside another request, so the copied rows sit among rows at other positions.
      const [shared, other] = await engine.complete([request("Hello there", { n: 3 }), request("xyz", { n: 2 })]);
      expect(shared!.choices.map((c) => c.text)).to.deep.equal([alone, alone, alone]);
      expect(shared!.promptTokens).to.equal("Hello there".length);
      const [otherAlone] = await engine.generateBatch([request("xyz")]);
      expect(other!.choices.map((c) => c.text)).to.deep.equal([otherAlone, otherAlone]);
    });

    it("n choices that join a generation already decoding still equal the request alone", async () => {
      const [alone] = await engine.generateBatch([request("join me")]);
      const running = engine.complete([request("a long one", { maxNewTokens: 60, temperature: 1, seed: 3 })]);
      const [joined] = await engine.complete([request("join me", { n: 3 })]);
      await running;
      expect(joined!.choices.map((c) => c.text)).to.deep.equal([alone, alone, alone]);
    });

    it("seeded samples: reproducible, choice i drawn with seed + i", async () => {
      const sampled = { temperature: 1, seed: 41, maxNewTokens: 16 };
      const [first] = await engine.complete([request("abc", { ...sampled, n: 3 })]);
      const [again] = await engine.complete([request("abc", { ...sampled, n: 3 })]);
      expect(again!.choices).to.deep.equal(first!.choices);
      const [third] = await engine.complete([request("abc", { ...sampled, seed: 43 })]);
      expect(third!.choices[0]!.text).to.equal(first!.choices[2]!.text);
      expect(new Set(first!.choices.map((c) => c.text)).size).to.be.greaterThan(1);
    });

    it("a stop sequence ends the text before it, batched and streamed, across token boundaries", async () => {
      const [full] = await engine.complete([request("The ", { maxNewTokens: 40 })]);
      const text = full!.choices[0]!.text;
      const stop = text.slice(10, 13);
      const expected = text.slice(0, text.indexOf(stop));
      const [stopped] = await engine.complete([request("The ", { maxNewTokens: 40, stop: [stop, "\u0000never"] })]);
      expect(stopped!.choices[0]).to.include({ text: expected, finishReason: "stop" });
      expect(stopped!.choices[0]!.completionTokens).to.be.below(40);
      expect(await engine.generateBatch([request("The ", { maxNewTokens: 40, stop: [stop] })])).to.deep.equal([expected]);

      const chunks = await collect(engine.completeStream(request("The ", { maxNewTokens: 40, stop: [stop] })));
      expect(chunks.map((c) => c.text).join("")).to.equal(expected);
      // No piece ever showed the start of the stop sequence.
      for (const chunk of chunks) expect(chunk.text.includes(stop[0]!) && !expected.includes(chunk.text)).to.equal(false);
      expect(chunks.at(-1)).to.include({ finishReason: "stop" });
    });

    it("a stream of n choices: each choice's pieces add up to the request alone, each ends with its finish reason", async () => {
      const [alone] = await engine.generateBatch([request("stream two")]);
      const chunks = await collect(engine.completeStream(request("stream two", { n: 2 })));
      for (const index of [0, 1]) {
        const mine = chunks.filter((c) => c.index === index);
        expect(mine.map((c) => c.text).join("")).to.equal(alone);
        expect(mine.filter((c) => c.finishReason)).to.have.length(1);
        expect(mine.at(-1)!.promptTokens).to.equal("stream two".length);
      }
    });

    it("finish reasons and token counts: length at max_tokens", async () => {
      const [done] = await engine.complete([request("ab", { maxNewTokens: 5 })]);
      expect(done!.choices[0]).to.include({ finishReason: "length", completionTokens: 5 });
    });

    it("log-probabilities are the raw distribution's: the greedy token is the most likely", async () => {
      const [done] = await engine.complete([request("Hello", { maxNewTokens: 8, logprobs: 3 })]);
      const logprobs = done!.choices[0]!.logprobs!;
      expect(logprobs).to.have.length(8);
      for (const entry of logprobs) {
        expect(entry.top).to.have.length(3);
        expect(entry.logprob).to.be.at.most(0);
        expect(entry.logprob).to.be.closeTo(entry.top[0]!.logprob, 1e-6);
        expect(entry.bytes).to.deep.equal(entry.top[0]!.bytes);
        const mass = entry.top.reduce((sum, alt) => sum + Math.exp(alt.logprob), 0);
        expect(mass).to.be.at.most(1 + 1e-5);
        expect(entry.top[0]!.logprob).to.be.at.least(entry.top[1]!.logprob);
      }
      // The same at temperature 2 with penalties: log-probabilities do not depend on them.
      const [hot] = await engine.complete([request("Hello", { maxNewTokens: 1, logprobs: 3, temperature: 2, presencePenalty: 1, seed: 1 })]);
      expect(hot!.choices[0]!.logprobs![0]!.top).to.deep.equal(logprobs[0]!.top);
    });

    it("top_p and min_p at their tightest keep only the most likely token", async () => {
      const [greedy] = await engine.generateBatch([request("Sampling")]);
      const [nucleus, minP] = await engine.complete([
        request("Sampling", { temperature: 1.5, topP: 1e-6, seed: 7 }),
        request("Sampling", { temperature: 1.5, minP: 1, seed: 7 }),
      ]);
      expect(nucleus!.choices[0]!.text).to.equal(greedy);
      expect(minP!.choices[0]!.text).to.equal(greedy);
    });

    it("penalties change greedy text", async () => {
      const [plain] = await engine.complete([request("aaaa", { maxNewTokens: 24 })]);
      const [penalised] = await engine.complete([request("aaaa", { maxNewTokens: 24, frequencyPenalty: 2, presencePenalty: 2, repetitionPenalty: 1.5 })]);
      expect(penalised!.choices[0]!.text).to.not.equal(plain!.choices[0]!.text);
    });
  });
}
