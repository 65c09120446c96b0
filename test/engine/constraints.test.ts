/**
 * The grammar side of constrained decoding, no addon needed: XGrammar's masks over the three
 * kinds of vocabulary the server loads (the demo model's bytes, GPT-2's byte-level BPE, Llama
 * 2's SentencePiece with byte fallback). A valid output, tokenized by the real tokenizer, is
 * allowed token by token and completes its grammar; an invalid token is never allowed; bad
 * schemas and grammars are refused with the reason.
 */
import { expect } from "chai";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { ConstraintCompiler, ConstraintError } from "../../src/engine/constraints/compiler.js";
import { byteVocabulary, huggingFaceVocabulary } from "../../src/engine/constraints/vocabulary.js";
import { ByteTokenizer, HuggingFaceTokenizer, type Tokenizer } from "../../src/engine/tokenizer.js";
import type { GenerationConstraint } from "../../src/types.js";
import { repoRoot } from "../helpers/fixtures.js";

interface RealTokenizers {
  gpt2TokenizerJson(): object;
  llamaTokenizerJson(): Promise<object>;
}

const allowed = (mask: Int32Array, id: number) => ((mask[id >> 5]! >>> (id & 31)) & 1) === 1;

const SCHEMA = {
  type: "object",
  properties: { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array", items: { type: "string" }, maxItems: 2 } },
  required: ["name", "age", "tags"],
  additionalProperties: false,
};
const VALID = '{"name": "Zoë ☃", "age": 42, "tags": ["a b", "c"]}';

/** Walks `text`'s tokens through a fresh matcher: every one allowed, and the grammar complete at the end. */
async function walk(compiler: ConstraintCompiler, tokenizer: Tokenizer, constraint: GenerationConstraint, text: string): Promise<void> {
  const matcher = await compiler.matcher(constraint);
  try {
    for (const id of tokenizer.encode(text)) {
      const { mask, complete } = await matcher.next();
      expect(complete).to.equal(false);
      expect(allowed(mask, id), `token ${id} (${JSON.stringify(tokenizer.decode([id]))}) of ${text}`).to.equal(true);
      expect(matcher.accept(id)).to.equal(true);
    }
    expect((await matcher.next()).complete).to.equal(true);
  } finally {
    matcher.dispose();
  }
}

describe("constraints: XGrammar over the server's vocabularies", function () {
  this.timeout(120000);

  it("the demo model's byte vocabulary: a schema-valid object walks through, an end only when complete", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const tokenizer = new ByteTokenizer();
    await walk(compiler, tokenizer, { type: "json_schema", schema: SCHEMA }, VALID);
    await walk(compiler, tokenizer, { type: "json_object" }, '{"x": [1, {"y": null}]}');
    await walk(compiler, tokenizer, { type: "regex", pattern: "[a-c]{2}-[0-9]{3}" }, "ab-123");
    await walk(compiler, tokenizer, { type: "grammar", grammar: 'root ::= "yes" | "no"' }, "no");
    // A required property cannot be skipped; the end token is refused mid-object.
    const matcher = await compiler.matcher({ type: "json_schema", schema: SCHEMA });
    for (const id of tokenizer.encode('{"name": "a", ')) matcher.accept(id);
    const { mask } = await matcher.next();
    expect(allowed(mask, '"'.charCodeAt(0))).to.equal(true);
    expect(allowed(mask, "}".charCodeAt(0))).to.equal(false);
    expect(allowed(mask, 257)).to.equal(false);
    matcher.dispose();
  });

  it("a model without an end-of-sequence token: matchers are made (no empty stop list reaches XGrammar, which aborts on one), and a complete object ends the choice", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(512, []));
    const tokenizer = new ByteTokenizer();
    for (let i = 0; i < 3; i++) {
      await walk(compiler, tokenizer, { type: "json_object" }, '{"x": [1, {"y": null}]}');
      await walk(compiler, tokenizer, { type: "json_schema", schema: SCHEMA }, VALID);
    }
    // Mid-object nothing ends it: the closing brace is allowed, and the choice is not complete.
    const matcher = await compiler.matcher({ type: "json_object" });
    for (const id of tokenizer.encode('{"a": 1')) matcher.accept(id);
    const { mask, complete } = await matcher.next();
    expect(complete).to.equal(false);
    expect(allowed(mask, "}".charCodeAt(0))).to.equal(true);
    matcher.dispose();
  });

  it("tool-call tags: one or more calls joined by the separator, then the end", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const call = '{"name": "f", "arguments": {"a": 1}}';
    const schema = { type: "object", properties: { name: { const: "f" }, arguments: { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false } }, required: ["name", "arguments"], additionalProperties: false };
    const constraint: GenerationConstraint = { type: "tagged_json", schema, begin: "<tool_call>\n", end: "\n</tool_call>", separator: "\n", repeat: true };
    const matcher = await compiler.matcher(constraint);
    for (const id of new ByteTokenizer().encode(`<tool_call>\n${call}\n</tool_call>`)) expect(matcher.accept(id)).to.equal(true);
    const after = await matcher.next();
    expect(after.complete).to.equal(false); // another call may follow
    expect(allowed(after.mask, 257)).to.equal(true); // or the end
    expect(allowed(after.mask, "\n".charCodeAt(0))).to.equal(true);
    matcher.dispose();
  });

  it("JSON strings stay valid JSON and UTF-8: no raw control characters, overlong forms or surrogates", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const constraint: GenerationConstraint = { type: "json_schema", schema: { type: "string", maxLength: 8 } };
    const matcher = await compiler.matcher(constraint);
    matcher.accept(0x22);
    let { mask } = await matcher.next();
    for (const refused of [0x00, 0x09, 0x11, 0x1f, 0xc0, 0xc1, 0xf5, 0xff]) expect(allowed(mask, refused), refused.toString(16)).to.equal(false);
    for (const fine of [0x41, 0x20, 0xe2, 0xed, 0xf0]) expect(allowed(mask, fine), fine.toString(16)).to.equal(true);
    matcher.accept(0xed); // U+D000..U+D7FF only: A0..BF would be a surrogate
    ({ mask } = await matcher.next());
    expect(allowed(mask, 0x9f)).to.equal(true);
    expect(allowed(mask, 0xa0)).to.equal(false);
    matcher.dispose();
    await walk(compiler, new ByteTokenizer(), constraint, '"☃ 한 😀"');
  });

  it("GPT-2's byte-level BPE and Llama 2's SentencePiece with byte fallback", async () => {
    const real = (await import(pathToFileURL(join(repoRoot, "test", "helpers", "real_tokenizers.mjs")).href)) as RealTokenizers;
    const gpt2 = real.gpt2TokenizerJson();
    const gpt2Compiler = await ConstraintCompiler.create(huggingFaceVocabulary(gpt2, 50257, [50256]));
    await walk(gpt2Compiler, new HuggingFaceTokenizer(gpt2), { type: "json_schema", schema: SCHEMA }, VALID);
    const llama = await real.llamaTokenizerJson();
    const llamaVocabulary = huggingFaceVocabulary(llama, 32000, [2]);
    expect(llamaVocabulary.type).to.equal("byte_fallback");
    const llamaCompiler = await ConstraintCompiler.create(llamaVocabulary);
    const tokenizer = new HuggingFaceTokenizer(llama);
    // The tokenizer prepends "▁" to a text's first word: the JSON is tokenized as a continuation.
    const ids = tokenizer.encode(`x${VALID}`).slice(1);
    expect(tokenizer.decode(ids)).to.equal(VALID);
    const matcher = await llamaCompiler.matcher({ type: "json_schema", schema: SCHEMA });
    for (const id of ids) {
      expect(allowed((await matcher.next()).mask, id), tokenizer.decode([id])).to.equal(true);
      expect(matcher.accept(id)).to.equal(true);
    }
    expect((await matcher.next()).complete).to.equal(true);
    matcher.dispose();
  });

  it("refuses what cannot be compiled, naming the problem; compiles each constraint once", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const cases: [GenerationConstraint, RegExp][] = [
      [{ type: "json_schema", schema: { type: "objectx" } }, /JSON Schema is invalid/],
      [{ type: "json_schema", schema: { type: "object", properties: { a: { type: 5 } } } }, /JSON Schema is invalid/],
      [{ type: "grammar", grammar: 'root ::= "a' }, /grammar cannot be compiled: .*string literal/i],
      [{ type: "regex", pattern: "([a-z" }, /regular expression cannot be compiled/],
    ];
    for (const [constraint, reason] of cases) {
      let caught: unknown;
      await compiler.compile(constraint).catch((err: unknown) => (caught = err));
      expect(caught, JSON.stringify(constraint)).to.be.instanceOf(ConstraintError);
      expect((caught as Error).message).to.match(reason);
    }
    // Still usable after the failures; the same constraint is the same compiled grammar.
    const one = compiler.compile({ type: "json_object" });
    expect(compiler.compile({ type: "json_object" })).to.equal(one);
    await one;
  });
});
