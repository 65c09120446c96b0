/** Tokenizers and config.json parsing: no addon needed. */
import { expect } from "chai";
import { readFileSync } from "node:fs";

import { parseModelConfig } from "../../src/engine/config.js";
import { ByteTokenizer, HuggingFaceTokenizer } from "../../src/engine/tokenizer.js";
import { fixture } from "../helpers/fixtures.js";

describe("ByteTokenizer", () => {
  const tokenizer = new ByteTokenizer();

  it("round-trips any text through UTF-8 bytes", () => {
    const text = "héllo wörld ☃ 😀 — ok";
    expect(tokenizer.decode(tokenizer.encode(text))).to.equal(text);
    expect(tokenizer.encode("😀")).to.deep.equal([0xf0, 0x9f, 0x98, 0x80]);
  });

  it("streams whole characters only, one byte at a time", () => {
    const text = "a☃😀b";
    const decoder = tokenizer.streamDecoder();
    const pieces = tokenizer.encode(text).map((id) => decoder.push([id]));
    expect(pieces).to.deep.equal(["a", "", "", "☃", "", "", "", "😀", "b"]);
    expect(decoder.flush()).to.equal("");
  });

  it("skips special tokens and flushes an unfinished character as U+FFFD", () => {
    expect(tokenizer.decode([104, 256, 105, 257])).to.equal("hi");
    const decoder = tokenizer.streamDecoder();
    expect(decoder.push([0xe2, 0x98])).to.equal("");
    expect(decoder.flush()).to.equal("\uFFFD");
  });
});

describe("HuggingFaceTokenizer (the fixture's byte-level BPE tokenizer.json)", () => {
  const tokenizer = new HuggingFaceTokenizer(JSON.parse(readFileSync(fixture("tiny-bpe.tokenizer.json"), "utf8")));

  it("round-trips text and decodes nothing to nothing", () => {
    const text = "the cat sat on the mat, héllo ☃";
    expect(tokenizer.decode(tokenizer.encode(text))).to.equal(text);
    expect(tokenizer.decode([])).to.equal("");
  });

  it("streamed pieces concatenate to the full decode, never splitting a character", () => {
    const ids = tokenizer.encode("naïve café ☃ the end");
    const decoder = tokenizer.streamDecoder();
    const pieces = ids.map((id) => decoder.push([id]));
    pieces.push(decoder.flush());
    expect(pieces.join("")).to.equal(tokenizer.decode(ids));
    for (const piece of pieces) expect(piece).not.to.include("\uFFFD");
  });
});

describe("parseModelConfig", () => {
  const valid = {
    format: "torchserve-node/causal-lm",
    architecture: "gpt",
    vocab_size: 259,
    block_size: 64,
    tokenizer: { kind: "byte", bos_token_id: 256, eos_token_id: 257, add_bos: false },
  };

  it("reads the fields the engine needs", () => {
    const config = parseModelConfig(JSON.stringify(valid));
    expect(config.contextLength).to.equal(64);
    expect(config.tokenizer).to.deep.include({ kind: "byte", eosTokenId: 257, bosTokenId: 256, addBos: false });
  });

  it("names the field that is wrong", () => {
    const broken: [unknown, RegExp][] = [
      ["not json", /not valid JSON/],
      [[], /JSON object/],
      [{ ...valid, vocab_size: 0 }, /vocab_size/],
      [{ ...valid, block_size: "64" }, /block_size/],
      [{ ...valid, tokenizer: { kind: "sentencepiece" } }, /kind/],
      [{ ...valid, tokenizer: { kind: "byte", eos_token_id: 999 } }, /eos_token_id/],
      [{ ...valid, format: "other" }, /format/],
    ];
    for (const [input, message] of broken) {
      const text = typeof input === "string" ? input : JSON.stringify(input);
      expect(() => parseModelConfig(text), text).to.throw(message).with.property("code", "ERR_CHECKPOINT_INTERFACE");
    }
  });
});
