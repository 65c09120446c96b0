/**
 * vLLM's constraint fields on the wire (structured_outputs, guided_json/regex/choice/grammar)
 * over a real socket: each form reaches the engine as the right constraint on /v1/chat/completions,
 * /v1/completions, /generate and /generate/stream; conflicting fields are a 400 naming them (422 on /generate, as
 * its other validation errors); a regex or grammar XGrammar cannot compile is a 400 with its
 * reason. The engine is hand-written but compiles constraints with the real compiler over the
 * demo's byte vocabulary, as TorchEngine does.
 */
import { expect } from "chai";

import { ServingError } from "../../../src/errors.js";
import { ConstraintCompiler, ConstraintError } from "../../../src/engine/constraints/compiler.js";
import { byteVocabulary } from "../../../src/engine/constraints/vocabulary.js";
import { xgrammar } from "../../../src/engine/constraints/xgrammar.js";
import { createApp } from "../../../src/http/index.js";
import { choiceGrammar } from "../../../src/http/text/structuredOutputs.js";
import type { CompletionChunk, CompletionRequest, GenerationConstraint } from "../../../src/types.js";
import { BatchEngine } from "../../helpers/engines.js";
import { postJson, serve, type Running } from "../../helpers/http.js";

const SCHEMA = { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 } }, required: ["a"] };

describe("structured_outputs and guided_* on the wire", function () {
  this.timeout(120000);
  let running: Running;
  let compiler: ConstraintCompiler;
  const seen: GenerationConstraint[] = [];

  before(async () => {
    compiler = await ConstraintCompiler.create(byteVocabulary(259, [257]));
    // The rich form (complete/completeStream) is the one that carries prepareConstraint.
    const engine = Object.assign(new BatchEngine({ auto: true }), {
      complete: async (requests: readonly CompletionRequest[]) =>
        requests.map((request) => ({
          promptTokens: 1,
          choices: Array.from({ length: request.n ?? 1 }, () => ({ text: "ok", finishReason: "stop" as const, completionTokens: 1 })),
        })),
      completeStream: async function* (): AsyncGenerator<CompletionChunk> {
        yield { index: 0, text: "ok", finishReason: "stop", completionTokens: 1, promptTokens: 1 };
      },
      prepareConstraint: async (constraint: GenerationConstraint) => {
        seen.push(constraint);
        try {
          await compiler.compile(constraint);
        } catch (err) {
          if (err instanceof ConstraintError) throw new ServingError("ERR_INVALID_ARGUMENT", err.message);
          throw err;
        }
      },
    });
    running = await serve(createApp(engine, { modelName: "m" }));
  });
  after(async () => {
    await running.close();
  });

  const chat = { model: "m", messages: [{ role: "user", content: "hi" }] };
  const completion = { model: "m", prompt: "hi" };
  const generate = { prompt: "hi" };
  const routes: [string, object][] = [
    ["/v1/chat/completions", chat],
    ["/v1/completions", completion],
    ["/generate", generate],
    ["/generate/stream", generate],
  ];

  /** The constraint the engine got for the body's extra fields on each route. */
  async function constraintOf(fields: object): Promise<GenerationConstraint[]> {
    const got: GenerationConstraint[] = [];
    for (const [path, body] of routes) {
      seen.length = 0;
      const response = await postJson(running.base, path, { ...body, ...fields });
      expect(response.status, `${path} ${JSON.stringify(fields)}: ${await response.clone().text()}`).to.equal(200);
      expect(seen, path).to.have.length(1);
      got.push(seen[0]!);
    }
    return got;
  }

  it("each form is the engine's constraint, on the three routes", async () => {
    const cases: [object, GenerationConstraint][] = [
      [{ structured_outputs: { regex: "[a-c]{2}" } }, { type: "regex", pattern: "[a-c]{2}" }],
      [{ guided_regex: "[a-c]{2}" }, { type: "regex", pattern: "[a-c]{2}" }],
      [{ structured_outputs: { json: SCHEMA } }, { type: "json_schema", schema: SCHEMA, strict: true }],
      [{ guided_json: JSON.stringify(SCHEMA) }, { type: "json_schema", schema: SCHEMA, strict: true }],
      [{ structured_outputs: { choice: ["yes", "no"] } }, { type: "grammar", grammar: 'root ::= "yes" | "no"' }],
      [{ guided_choice: ["yes", "no", "yes"] }, { type: "grammar", grammar: 'root ::= "yes" | "no"' }],
      [{ structured_outputs: { grammar: 'root ::= "a"+' } }, { type: "grammar", grammar: 'root ::= "a"+' }],
      [{ guided_grammar: 'root ::= "a"+' }, { type: "grammar", grammar: 'root ::= "a"+' }],
      [{ structured_outputs: { json_object: true, disable_any_whitespace: true } }, { type: "json_object" }],
      // Their "off" values and the other's "off" value combine with anything.
      [{ guided_regex: "x", response_format: { type: "text" }, guided_json: null, structured_outputs: null }, { type: "regex", pattern: "x" }],
    ];
    for (const [fields, expected] of cases) {
      for (const constraint of await constraintOf(fields)) expect(constraint, JSON.stringify(fields)).to.deep.equal(expected);
    }
  });

  it("a choice's grammar accepts exactly its strings, quotes, backslashes, newlines and all", async () => {
    const choices = ['say "hi"', "back\\slash", "two\nlines", "☃ é 😀", "tab\there", "a", "ab"];
    const grammar = await compiler.compile({ type: "grammar", grammar: choiceGrammar(choices) });
    const accepts = async (text: string) => {
      const matcher = await xgrammar().GrammarMatcher.createGrammarMatcher(grammar, [257]);
      try {
        return matcher._acceptString(text) && matcher.acceptToken(257);
      } finally {
        matcher.dispose();
      }
    };
    for (const choice of choices) expect(await accepts(choice), JSON.stringify(choice)).to.equal(true);
    for (const other of ['say "hi"!', "back\\\\slash", "b", "", "two lines"]) expect(await accepts(other), JSON.stringify(other)).to.equal(false);
  });

  it("conflicting or malformed fields: 400 on /v1 (422 on /generate) naming them", async () => {
    const cases: [object, string, RegExp][] = [
      [{ response_format: { type: "json_object" }, guided_regex: "x" }, "guided_regex", /cannot be combined with response_format/],
      [{ structured_outputs: { regex: "x" }, guided_choice: ["a"] }, "guided_choice", /cannot be combined with structured_outputs/],
      [{ guided_regex: "x", guided_grammar: 'root ::= "a"' }, "guided_grammar", /cannot be combined with guided_regex/],
      [{ structured_outputs: { regex: "x", choice: ["a"] } }, "structured_outputs", /not regex and choice/],
      [{ structured_outputs: {} }, "structured_outputs", /needs one of json, regex, choice, grammar, json_object/],
      [{ structured_outputs: { regex: "x", structural_tag: "{}" } }, "structured_outputs.structural_tag", /not supported/],
      [{ guided_json: "{not json" }, "guided_json", /is not JSON/],
      [{ guided_json: "[1]" }, "guided_json", /must be a JSON Schema/],
      [{ guided_choice: [] }, "guided_choice", /fewer|at least/i],
      [{ guided_regex: 5 }, "guided_regex", /string/],
    ];
    for (const [fields, param, message] of cases) {
      for (const [path, body] of routes) {
        const response = await postJson(running.base, path, { ...body, ...fields });
        const text = await response.text();
        expect(response.status, `${path} ${JSON.stringify(fields)}: ${text}`).to.equal(path.startsWith("/generate") ? 422 : 400);
        if (!path.startsWith("/generate")) {
          const { error } = JSON.parse(text) as { error: { param: string; message: string } };
          expect(error.param, `${path} ${JSON.stringify(fields)}`).to.equal(param);
          expect(error.message, `${path} ${JSON.stringify(fields)}`).to.match(message);
        } else {
          expect(text, `${path} ${JSON.stringify(fields)}`).to.include(param.split(".").at(-1)!);
        }
      }
    }
    // With tools: the guided forms are refused (response_format keeps its existing behaviour).
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
    for (const fields of [{ guided_regex: "x" }, { structured_outputs: { choice: ["a"] } }]) {
      const response = await postJson(running.base, "/v1/chat/completions", { ...chat, ...fields, tools });
      expect(response.status).to.equal(400);
      const { error } = (await response.json()) as { error: { param: string; message: string } };
      expect(error.param).to.equal(Object.keys(fields)[0]);
      expect(error.message).to.match(/cannot be combined with tools/);
    }
  });

  it("odd values are answered, never with a 5xx", async () => {
    const odd: object[] = [
      { guided_json: "null" },
      { guided_json: "5" },
      { guided_json: "true" },
      { guided_json: {} },
      { structured_outputs: { json_object: false } },
      { structured_outputs: { json_object: false, choice: [""] } },
      { guided_choice: [""] },
      { guided_choice: ["", "\u0000", "😀".repeat(200)] },
      { guided_regex: "" },
      { guided_regex: "\\" },
      { guided_grammar: "root ::= root" },
      { guided_grammar: 'root ::= "a" root | ""' },
      { structured_outputs: { regex: "a", disable_any_whitespace: "yes" } },
      { structured_outputs: [] },
      { guided_choice: "a" },
    ];
    for (const fields of odd) {
      for (const [path, body] of routes) {
        const response = await postJson(running.base, path, { ...body, ...fields });
        expect(response.status, `${path} ${JSON.stringify(fields)}: ${await response.text()}`).to.be.within(200, 499);
      }
    }
  });

  it("a regex or grammar XGrammar cannot compile is a 400 with its reason, on every route", async () => {
    const cases: [object, RegExp][] = [
      [{ guided_regex: "([a-z" }, /regular expression cannot be compiled: .*Unclosed '\['/],
      [{ structured_outputs: { regex: "(?=a)a" } }, /regular expression cannot be compiled: .*Lookahead is not supported/],
      [{ guided_grammar: "root ::= x" }, /grammar cannot be compiled: .*Rule \\?"x\\?" is not defined/],
      [{ structured_outputs: { grammar: 'start ::= "a"' } }, /grammar cannot be compiled: .*root rule with name \\?"root\\?" is not found/],
      [{ guided_json: { type: "integer", minimum: 3, maximum: 2 } }, /JSON Schema cannot be compiled: no integer fits/],
    ];
    for (const [fields, reason] of cases) {
      for (const [path, body] of routes) {
        const response = await postJson(running.base, path, { ...body, ...fields });
        const text = await response.text();
        expect(response.status, `${path} ${JSON.stringify(fields)}: ${text}`).to.equal(400);
        expect(text, path).to.match(reason);
      }
    }
  });
});
