/**
 * Nesting limits before XGrammar (src/engine/constraints/compiler.ts): its WebAssembly build
 * overflows its stack on a grammar or regex ~150 parentheses deep or a schema ~60 levels deep
 * (fewer through $ref chains), after which every compile of the process fails. Such
 * constraints are refused with a ConstraintError, and the compiler keeps working; recursive
 * schemas (a $ref cycle) are not deep.
 */
import { expect } from "chai";

import { ConstraintCompiler, ConstraintError, MAX_GROUP_DEPTH, MAX_SCHEMA_DEPTH } from "../../../src/engine/constraints/compiler.js";
import { byteVocabulary } from "../../../src/engine/constraints/vocabulary.js";
import type { GenerationConstraint } from "../../../src/types.js";

const nested = (depth: number, open: string, inner: string, close: string) => open.repeat(depth) + inner + close.repeat(depth);

describe("constraints: nesting limits", function () {
  this.timeout(300000);

  it("deep grammars, regexes and schemas are refused, and the compiler still works after them", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const deep = 200;
    const refused: [GenerationConstraint, RegExp][] = [
      [{ type: "grammar", grammar: `root ::= ${nested(deep, "(", '"a"', ")")}` }, /grammar nests 200 parentheses deep/],
      [{ type: "regex", pattern: nested(deep, "(", "a", ")") }, /regular expression nests 200 parentheses deep/],
      [{ type: "json_schema", schema: JSON.parse(nested(deep, '{"type":"array","items":', "{}", "}")) }, /JSON Schema nests more than 32 levels/],
      [
        {
          type: "json_schema",
          schema: { $defs: Object.fromEntries(Array.from({ length: 50 }, (_unused, i) => [`d${i}`, { type: "array", items: i < 49 ? { $ref: `#/$defs/d${i + 1}` } : {} }])), $ref: "#/$defs/d0" },
        },
        /through \$ref too/,
      ],
      [{ type: "tagged_json", begin: "<a>", end: "</a>", schema: JSON.parse(nested(deep, '{"type":"object","properties":{"a":', "{}", "}}")) }, /tool-call format nests/],
    ];
    for (const [constraint, reason] of refused) {
      let caught: unknown;
      await compiler.compile(constraint).catch((err: unknown) => (caught = err));
      expect(caught, constraint.type).to.be.instanceOf(ConstraintError);
      expect((caught as Error).message).to.match(reason);
    }
    // At the limits, and a recursive schema: compiled, and the compiler is still sound.
    const fine: GenerationConstraint[] = [
      { type: "grammar", grammar: `root ::= ${nested(MAX_GROUP_DEPTH, "(", '"a"', ")")}` },
      { type: "json_schema", schema: JSON.parse(nested(MAX_SCHEMA_DEPTH - 1, '{"type":"array","items":', "{}", "}")) },
      { type: "json_schema", schema: { $defs: { node: { type: "object", properties: { next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] } }, required: ["next"] } }, $ref: "#/$defs/node" } },
      { type: "json_schema", schema: { type: "integer", minimum: 0, maximum: 3 } },
    ];
    for (const constraint of fine) await compiler.compile(constraint);
  });

  it("refuses keywords XGrammar would accept and not enforce, naming each, and keeps oneOf, one-schema allOf and uniqueItems false", async () => {
    const compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ type: "integer", multipleOf: 5 }, "/multipleOf"],
      [{ type: "array", items: { type: "integer" }, uniqueItems: true }, "/uniqueItems"],
      [{ type: "object", properties: { a: { not: { type: "null" } } } }, "/properties/a/not"],
      [{ type: "object", properties: { a: { type: "integer" } }, if: { required: ["a"] }, then: { required: ["b"] } }, "/if"],
      [{ type: "object", dependentRequired: { a: ["b"] } }, "/dependentRequired"],
      [{ type: "array", contains: { const: 1 } }, "/contains"],
      [{ $defs: { n: { allOf: [{ type: "integer" }, { minimum: 5 }] } }, $ref: "#/$defs/n" }, "/$defs/n/allOf"],
      [{ type: "array", items: { anyOf: [{ type: "string" }, { type: "number", multipleOf: 0.5 }] } }, "/items/anyOf/1/multipleOf"],
    ];
    for (const [schema, path] of refused) {
      let caught: unknown;
      await compiler.compile({ type: "json_schema", schema }).catch((err: unknown) => (caught = err));
      expect(caught, path).to.be.instanceOf(ConstraintError);
      expect((caught as Error).message).to.contain(`uses ${path}, which structured output cannot enforce`);
    }
    let caught: unknown;
    await compiler.compile({ type: "tagged_json", begin: "<a>", end: "</a>", schema: { type: "object", properties: { n: { type: "integer", multipleOf: 2 } } } }).catch((err: unknown) => (caught = err));
    expect((caught as Error).message).to.match(/tool-call format uses \/properties\/n\/multipleOf/);
    for (const schema of [
      { oneOf: [{ type: "object", properties: { kind: { const: "a" } }, required: ["kind"] }, { type: "object", properties: { kind: { const: "b" } }, required: ["kind"] }] },
      { allOf: [{ type: "object", properties: { a: { type: "integer" } } }] },
      { type: "array", items: { type: "integer" }, uniqueItems: false },
    ]) {
      await compiler.compile({ type: "json_schema", schema });
    }
  });
});
