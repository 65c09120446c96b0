/**
 * Schema rewrites before XGrammar (src/engine/constraints/schemaRewrite.ts): `date`, `time` and
 * `date-time` accept no string that ajv-formats refuses (XGrammar 0.1.27's own admit
 * 2023-02-29 and 2024-04-31), checked on every day of leap and common years; a required
 * property that `properties` does not list cannot be left out.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { expect } from "chai";

import { ConstraintCompiler } from "../../../src/engine/constraints/compiler.js";
import { byteVocabulary } from "../../../src/engine/constraints/vocabulary.js";
import { xgrammar } from "../../../src/engine/constraints/xgrammar.js";

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const ajv = addFormats(new Ajv2020({ strict: false }));
const STOP = 257;

/** JSON in the constrained form: `, ` and `: ` separators, nothing else between tokens. */
function compact(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(compact).join(", ")}]`;
  if (typeof value === "object" && value !== null) return `{${Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}: ${compact(item)}`).join(", ")}}`;
  return JSON.stringify(value);
}

describe("constraints: schema rewrites for XGrammar", function () {
  this.timeout(300000);
  let compiler: ConstraintCompiler;
  before(async () => {
    compiler = await ConstraintCompiler.create(byteVocabulary(259, [STOP]));
  });

  async function accepts(schema: object, value: unknown): Promise<boolean> {
    const matcher = await xgrammar().GrammarMatcher.createGrammarMatcher(await compiler.compile({ type: "json_schema", schema: schema as Record<string, unknown> }), [STOP]);
    try {
      return matcher._acceptString(compact(value)) && matcher.acceptToken(STOP);
    } finally {
      matcher.dispose();
    }
  }

  it("format date: exactly the real days of 1900, 2000, 2023 and 2024 (days 00-32 of months 00-13)", async () => {
    const schema = { type: "string", format: "date" };
    const wrong: string[] = [];
    for (const year of ["1900", "2000", "2023", "2024", "0000"]) {
      for (let month = 0; month <= 13; month++) {
        for (let day = 0; day <= 32; day++) {
          const text = `${year}-${String(month).padStart(2, "0")}-${String(day).padStart(2, "0")}`;
          if ((await accepts(schema, text)) !== ajv.validate(schema, text)) wrong.push(text);
        }
      }
    }
    expect(wrong, wrong.join(" ")).to.deep.equal([]);
  });

  it("format time and date-time: never what ajv refuses; the usual forms accepted", async () => {
    const samples: [string, string, boolean][] = [
      ["time", "10:00:00Z", true],
      ["time", "23:59:59.123+05:30", true],
      ["time", "10:00:60Z", false],
      ["time", "24:00:00Z", false],
      ["time", "10:60:00Z", false],
      ["time", "10:00:00+24:00", false],
      ["date-time", "2024-02-29T10:00:00Z", true],
      ["date-time", "2023-02-29T10:00:00Z", false],
      ["date-time", "2024-04-31T10:00:00Z", false],
      ["date-time", "2024-01-31T10:00:60Z", false],
      ["date-time", "2024-01-31T10:00:00.5-01:00", true],
    ];
    for (const [format, text, expected] of samples) {
      const schema = { type: "string", format };
      expect(ajv.validate(schema, text), `ajv ${format} ${text}`).to.equal(expected);
      expect(await accepts(schema, text), `${format} ${text}`).to.equal(expected);
    }
    // Inside an object, as clients send them.
    const event = { type: "object", properties: { at: { type: "string", format: "date-time" }, on: { type: "string", format: "date" } }, required: ["at", "on"], additionalProperties: false };
    expect(await accepts(event, { at: "2024-02-29T00:00:00Z", on: "2000-02-29" })).to.equal(true);
    expect(await accepts(event, { at: "2024-02-29T00:00:00Z", on: "1900-02-29" })).to.equal(false);
  });

  it("a required property that properties does not list must be there", async () => {
    const schema = { type: "object", properties: { a: { type: "string", maxLength: 3 } }, required: ["a", "b"] };
    expect(await accepts(schema, { a: "x" })).to.equal(false);
    expect(await accepts(schema, { a: "x", b: [1, null] })).to.equal(true);
    const typed = { type: "object", properties: {}, required: ["n"], additionalProperties: { type: "integer", minimum: 0, maximum: 5 } };
    expect(await accepts(typed, { n: 5 })).to.equal(true);
    expect(await accepts(typed, { n: 6 })).to.equal(false);
    expect(await accepts(typed, {})).to.equal(false);
  });
});
