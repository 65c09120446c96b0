/**
 * Exact numeric bounds under XGrammar (src/engine/constraints/numericBounds.ts): the grammar of
 * a schema with minimum/maximum/exclusiveMinimum/exclusiveMaximum accepts exactly the values
 * ajv accepts, for integers by enumeration around the bounds and for numbers on many sampled
 * texts, alone and inside objects, arrays, $defs, anyOf and tool-call tags. XGrammar 0.1.27's
 * own converter admits 121-129 under `maximum: 120` and `3` under `exclusiveMaximum: 3`.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "chai";

import { ConstraintCompiler, ConstraintError } from "../../../src/engine/constraints/compiler.js";
import { byteVocabulary } from "../../../src/engine/constraints/vocabulary.js";
import { xgrammar } from "../../../src/engine/constraints/xgrammar.js";
import type { GenerationConstraint } from "../../../src/types.js";

const ajv = new Ajv2020({ strict: false });
const STOP = 257;

/** Whether the constraint's grammar accepts the whole text (and may end there). */
async function accepts(compiler: ConstraintCompiler, constraint: GenerationConstraint, text: string): Promise<boolean> {
  const matcher = await xgrammar().GrammarMatcher.createGrammarMatcher(await compiler.compile(constraint), [STOP]);
  try {
    return matcher._acceptString(text) && matcher.acceptToken(STOP);
  } finally {
    matcher.dispose();
  }
}

/** A deterministic pseudo-random source (tests must reproduce). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const INTEGER_BOUNDS: Record<string, unknown>[] = [
  { minimum: 0, maximum: 120 },
  { minimum: -5, maximum: 120 },
  { minimum: -120, maximum: -7 },
  { exclusiveMinimum: -100, exclusiveMaximum: 100 },
  { minimum: 7 },
  { exclusiveMaximum: -3 },
  { maximum: 0 },
  { exclusiveMinimum: 0 },
  { minimum: 1.5, maximum: 99.5 },
  { minimum: -2.5, exclusiveMaximum: 2.5 },
  { minimum: 95, maximum: 105, exclusiveMaximum: 101 },
  { minimum: 42, maximum: 42 },
  { minimum: 1000, maximum: 1234 },
];

const NUMBER_BOUNDS: Record<string, unknown>[] = [
  { maximum: 1 },
  { minimum: 0, maximum: 1 },
  { minimum: 1.5, exclusiveMaximum: 3 },
  { exclusiveMinimum: 0 },
  { exclusiveMinimum: -0.25, exclusiveMaximum: 0.25 },
  { minimum: -12.75, maximum: -0.5 },
  { maximum: 0, exclusiveMinimum: -1 },
  { minimum: 0.001, maximum: 0.01 },
  { minimum: 19.99, maximum: 20.01 },
  { minimum: -3 },
  { exclusiveMaximum: 100 },
  { minimum: 2.5, maximum: 2.5 },
];

/** Number texts near the bounds and far from them: signs, leading zeros, fractions, exponents. */
function numberTexts(next: () => number, count: number): string[] {
  const pick = <T>(items: T[]) => items[Math.floor(next() * items.length)]!;
  const texts = new Set<string>(["0", "-0", "1", "1.0", "3", "3.0", "2.5", "-1", "0.5", "100", "1e0", "0.25", "-0.25", "20.01", "20.010", "0.0010", "1.2"]);
  while (texts.size < count) {
    const int = pick(["0", "1", "2", "3", "12", "19", "20", "99", "100", "101", "05", String(Math.floor(next() * 1000))]);
    const fracLength = pick([0, 0, 1, 2, 3, 5]);
    const frac = Array.from({ length: fracLength }, () => pick(["0", "0", "1", "5", "9", String(Math.floor(next() * 10))])).join("");
    const exponent = next() < 0.1 ? pick(["e0", "e1", "E-1", "e+2"]) : "";
    texts.add(`${next() < 0.35 ? "-" : ""}${int}${fracLength > 0 ? `.${frac}` : next() < 0.05 ? "." : ""}${exponent}`);
  }
  return [...texts];
}

/** Ajv's verdict on a text; false when it is not JSON. */
function valid(schema: object, text: string): boolean {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  return ajv.validate(schema, value);
}

describe("constraints: exact numeric bounds", function () {
  this.timeout(300000);
  let compiler: ConstraintCompiler;
  before(async () => {
    compiler = await ConstraintCompiler.create(byteVocabulary(259, [STOP]));
  });

  for (const bounds of INTEGER_BOUNDS) {
    it(`integer ${JSON.stringify(bounds)}: exactly the values in range, from -1300 to 1300`, async () => {
      const schema = { type: "integer", ...bounds };
      const wrong: string[] = [];
      for (let value = -1300; value <= 1300; value++) {
        const text = String(value);
        if ((await accepts(compiler, { type: "json_schema", schema }, text)) !== valid(schema, text)) wrong.push(text);
      }
      for (const text of ["-0", "01", "1.0", "1e1", "+1", ""]) {
        if (await accepts(compiler, { type: "json_schema", schema }, text)) wrong.push(text);
      }
      expect(wrong, `accepted or refused wrongly: ${wrong.join(" ")}`).to.deep.equal([]);
    });
  }

  for (const bounds of NUMBER_BOUNDS) {
    it(`number ${JSON.stringify(bounds)}: accepts what ajv accepts (no exponent), never what it refuses`, async () => {
      const schema = { type: "number", ...bounds };
      const wrong: string[] = [];
      for (const text of numberTexts(random(JSON.stringify(bounds).length * 7919), 400)) {
        const accepted = await accepts(compiler, { type: "json_schema", schema }, text);
        const canonical = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/.test(text) && text !== "-0" && !/^-0(\.0+)?$/.test(text);
        // The grammar's lexical form: no exponent, no negative zero; within it, ajv decides.
        if (accepted !== (canonical && valid(schema, text))) wrong.push(`${text}(${accepted ? "accepted" : "refused"})`);
      }
      expect(wrong, wrong.join(" ")).to.deep.equal([]);
    });
  }

  it("bounds inside objects, arrays, $defs, anyOf, nullable types and tool-call tags", async () => {
    const schema = {
      $defs: { pct: { type: "number", minimum: 0, maximum: 100 } },
      type: "object",
      properties: {
        age: { type: "integer", minimum: 0, maximum: 120 },
        scores: { type: "array", items: { $ref: "#/$defs/pct" }, maxItems: 2 },
        pick: { anyOf: [{ type: "integer", exclusiveMinimum: 0, maximum: 9 }, { type: "string", maxLength: 2 }] },
        maybe: { type: ["integer", "null"], minimum: -3, maximum: 3 },
      },
      required: ["age", "scores", "pick", "maybe"],
      additionalProperties: false,
    };
    const cases: [string, boolean][] = [
      ['{"age": 120, "scores": [100, 0.5], "pick": 9, "maybe": null}', true],
      ['{"age": 121, "scores": [], "pick": 1, "maybe": 0}', false],
      ['{"age": 129, "scores": [], "pick": 1, "maybe": 0}', false],
      ['{"age": 0, "scores": [100.5], "pick": 1, "maybe": 0}', false],
      ['{"age": 0, "scores": [100.0], "pick": "ab", "maybe": -3}', true],
      ['{"age": 0, "scores": [], "pick": 0, "maybe": 0}', false],
      ['{"age": 0, "scores": [], "pick": 10, "maybe": 0}', false],
      ['{"age": 0, "scores": [], "pick": 5, "maybe": 4}', false],
      ['{"age": 0, "scores": [], "pick": 5, "maybe": -4}', false],
    ];
    for (const [text, expected] of cases) {
      expect(valid(schema, text), `ajv: ${text}`).to.equal(expected);
      expect(await accepts(compiler, { type: "json_schema", schema }, text), text).to.equal(expected);
      expect(await accepts(compiler, { type: "json_schema", schema, strict: false }, text), `strict false: ${text}`).to.equal(expected);
    }
    const tool = { type: "object", properties: { name: { const: "f" }, arguments: { type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 120 } }, required: ["n"], additionalProperties: false } }, required: ["name", "arguments"], additionalProperties: false };
    const tagged: GenerationConstraint = { type: "tagged_json", schema: tool, begin: "<tool_call>\n", end: "\n</tool_call>" };
    expect(await accepts(compiler, tagged, '<tool_call>\n{"name": "f", "arguments": {"n": 120}}\n</tool_call>')).to.equal(true);
    expect(await accepts(compiler, tagged, '<tool_call>\n{"name": "f", "arguments": {"n": 121}}\n</tool_call>')).to.equal(false);
  });

  it("bounds no value fits are a ConstraintError naming them", async () => {
    for (const schema of [{ type: "integer", minimum: 5, maximum: 4 }, { type: "integer", minimum: 1.2, maximum: 1.8 }, { type: "number", exclusiveMinimum: 1, exclusiveMaximum: 1 }]) {
      let caught: unknown;
      await compiler.compile({ type: "json_schema", schema }).catch((err: unknown) => (caught = err));
      expect(caught, JSON.stringify(schema)).to.be.instanceOf(ConstraintError);
      expect((caught as Error).message).to.match(/JSON Schema cannot be compiled: no (integer|number) fits the bounds/);
    }
  });
});
