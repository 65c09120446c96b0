/**
 * Hugging Face tokenizers as real models ship them, on real vocabularies: GPT-2's byte-level
 * BPE (built from `gpt-3-encoder`'s files) and Llama 2's SentencePiece BPE with byte fallback
 * (built from `llama-tokenizer-js`'s embedded vocabulary) by test/helpers/real_tokenizers.mjs.
 * Token ids are checked against each package's own encoder and, for Llama, against ids the
 * real Llama tokenizer produced. No addon needed.
 */
import { expect } from "chai";
import encoder from "gpt-3-encoder";
import llamaTokenizerJs from "llama-tokenizer-js";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { parseModelConfig } from "../../src/engine/config.js";
import { HuggingFaceTokenizer, type Tokenizer } from "../../src/engine/tokenizer.js";
import { repoRoot } from "../helpers/fixtures.js";

interface RealTokenizers {
  gpt2TokenizerJson(): object;
  llamaTokenizerJson(): Promise<object>;
}

async function realTokenizers(): Promise<RealTokenizers> {
  return (await import(pathToFileURL(join(repoRoot, "test", "helpers", "real_tokenizers.mjs")).href)) as RealTokenizers;
}

/** Streams ids one at a time after `context`; returns the pieces (flush included). */
function stream(tokenizer: Tokenizer, ids: number[], context: number[] = []): string[] {
  const decoder = tokenizer.streamDecoder(context);
  const pieces = ids.map((id) => decoder.push([id]));
  pieces.push(decoder.flush());
  return pieces;
}

const TEXTS = [
  "Hello world",
  "The llama (/ˈlɑːmə/; 🦙Spanish pronunciation: [ˈʎama]) is a domesticated camelid.",
  "naïve café ☃ 😀 — 镇 ok",
  "  leading spaces\n\nand\ttabs  ",
  "code: for (let i = 0; i < 10; i++) { sum += i; }",
];

describe("HuggingFaceTokenizer on GPT-2's vocabulary (byte-level BPE)", function () {
  this.timeout(60000);
  let tokenizer: HuggingFaceTokenizer;

  before(async () => {
    tokenizer = new HuggingFaceTokenizer((await realTokenizers()).gpt2TokenizerJson());
  });

  it("encodes as GPT-2 does (gpt-3-encoder's own BPE), with GPT-2's ids", () => {
    expect(tokenizer.encode("Hello world")).to.deep.equal([15496, 995]);
    for (const text of TEXTS) expect(tokenizer.encode(text), text).to.deep.equal(encoder.encode(text));
  });

  it("round-trips text; <|endoftext|> is special and decodes to nothing", () => {
    for (const text of TEXTS) expect(tokenizer.decode(tokenizer.encode(text))).to.equal(text);
    expect(tokenizer.encode("a<|endoftext|>b")).to.deep.equal([64, 50256, 65]);
    expect(tokenizer.decode([64, 50256, 65])).to.equal("ab");
  });

  it("streams whole characters: a snowman split over two byte tokens comes out once, whole", () => {
    const ids = tokenizer.encode(" ☃");
    expect(ids.length).to.equal(2);                               // one character, two tokens
    expect(stream(tokenizer, ids)).to.deep.equal(["", " ☃", ""]);
    for (const text of TEXTS) {
      const pieces = stream(tokenizer, tokenizer.encode(text));
      expect(pieces.join("")).to.equal(text);
      for (const piece of pieces) expect(piece).not.to.include("\uFFFD");
    }
  });
});

describe("HuggingFaceTokenizer on Llama 2's vocabulary (SentencePiece BPE, byte fallback)", function () {
  this.timeout(60000);
  let tokenizer: HuggingFaceTokenizer;

  before(async () => {
    tokenizer = new HuggingFaceTokenizer(await (await realTokenizers()).llamaTokenizerJson());
  });

  it("encodes to the ids of Llama's own tokenizer (metaspace, byte fallback)", () => {
    // Ids the real Llama tokenizer gives (llama-tokenizer-js's test table, BOS dropped).
    expect(tokenizer.encode("grabbed")).to.deep.equal([2646, 1327, 287]);
    expect(tokenizer.encode(" grabbed")).to.deep.equal([29871, 2646, 1327, 287]);
    expect(tokenizer.encode("\n")).to.deep.equal([29871, 13]);
    expect(tokenizer.encode("🦙")).to.deep.equal([29871, 243, 162, 169, 156]);   // <0xF0><0x9F><0xA6><0x99>
    expect(tokenizer.encode("ax\n####\nboo")).to.deep.equal([4853, 13, 4136, 13, 833, 29877]);
    for (const text of TEXTS) {
      expect([1, ...tokenizer.encode(text)], text).to.deep.equal(llamaTokenizerJs.encode(text));
    }
  });

  it("round-trips text, skipping <s> and </s>", () => {
    for (const text of TEXTS) expect(tokenizer.decode(tokenizer.encode(text))).to.equal(text);
    expect(tokenizer.decode([1, 2646, 1327, 287, 2])).to.equal("grabbed");
  });

  it("a continuation keeps the space of its first word (the decoder strips a sequence's first)", () => {
    const prompt = tokenizer.encode("The cat");
    const continuation = tokenizer.encode("The cat sat on the mat").slice(prompt.length);
    expect(tokenizer.decode(continuation)).to.equal("sat on the mat");      // alone: stripped
    expect(tokenizer.decode(continuation, prompt)).to.equal(" sat on the mat");
    expect(stream(tokenizer, continuation, prompt).join("")).to.equal(" sat on the mat");
  });

  it("streams a character spread over byte-fallback tokens only once it is complete", () => {
    const prompt = tokenizer.encode("Hi");
    const ids = tokenizer.encode("Hi 🦙 ☃!").slice(prompt.length);
    const pieces = stream(tokenizer, ids, prompt);
    expect(pieces.join("")).to.equal(" 🦙 ☃!");
    expect(pieces.filter((piece) => piece !== "")).to.include.members(["🦙"]);
    for (const piece of pieces) expect(piece).not.to.include("\uFFFD");
    // A stream that ends inside a character flushes it as U+FFFD, like the byte tokenizer.
    const cut = stream(tokenizer, tokenizer.encode("🦙").slice(0, 3));
    expect(cut.slice(0, -1).join("")).to.not.include("\uFFFD");
    expect(cut[cut.length - 1]).to.include("\uFFFD");
  });
});

describe("parseModelConfig: several end-of-sequence ids, chat template, model name", () => {
  const base = {
    format: "torchserve-node/causal-lm",
    architecture: "llama",
    vocab_size: 300,
    block_size: 64,
    dtype: "bfloat16",
    chat_template: "{{ messages }}",
    model_name: "Qwen2.5-0.5B-Instruct",
    tokenizer: { kind: "huggingface", file: "tokenizer.json", bos_token_id: null, eos_token_id: 7, eos_token_ids: [7, 9], add_bos: false },
  };

  it("reads eos_token_ids, and falls back to eos_token_id alone", () => {
    const config = parseModelConfig(JSON.stringify(base));
    expect(config.tokenizer.eosTokenIds).to.deep.equal([7, 9]);
    expect(config.tokenizer.eosTokenId).to.equal(7);
    expect(config.chatTemplate).to.equal("{{ messages }}");
    expect(config.modelName).to.equal("Qwen2.5-0.5B-Instruct");
    const older = { ...base, tokenizer: { ...base.tokenizer, eos_token_ids: undefined } };
    expect(parseModelConfig(JSON.stringify(older)).tokenizer.eosTokenIds).to.deep.equal([7]);
    const none = { ...base, tokenizer: { ...base.tokenizer, eos_token_id: null, eos_token_ids: undefined } };
    expect(parseModelConfig(JSON.stringify(none)).tokenizer.eosTokenIds).to.deep.equal([]);
  });

  it("names a bad eos_token_ids, chat_template or model_name", () => {
    const broken: [unknown, RegExp][] = [
      [{ ...base, tokenizer: { ...base.tokenizer, eos_token_ids: 7 } }, /eos_token_ids/],
      [{ ...base, tokenizer: { ...base.tokenizer, eos_token_ids: [7, 300] } }, /eos_token_ids.*300/],
      [{ ...base, tokenizer: { ...base.tokenizer, eos_token_ids: [9] } }, /eos_token_id" 7 is not in/],
      [{ ...base, chat_template: 5 }, /chat_template/],
      [{ ...base, model_name: ["x"] }, /model_name/],
    ];
    for (const [input, message] of broken) {
      expect(() => parseModelConfig(JSON.stringify(input))).to.throw(message).with.property("code", "ERR_CHECKPOINT_INTERFACE");
    }
  });
});
