/**
 * The constraint a request asks for, from OpenAI's `response_format` or vLLM's extensions:
 * `structured_outputs: {json | regex | choice | grammar | json_object}` and the older top-level
 * `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`. Shared by
 * /v1/chat/completions, /v1/completions and (as an extension) /generate and /generate/stream.
 * A request gives at most one of them; the guided forms do not combine with tools.
 */
import { ServingError } from "../../errors.js";
import type { CompletionRequest, GenerationConstraint } from "../../types.js";
import { constraintOfResponseFormat } from "./responseFormat.js";

const nullable = (schema: object) => ({ anyOf: [schema, { type: "null" }] });
const jsonSchemaOrText = { type: ["object", "boolean", "string"], description: "A JSON Schema, as an object or as JSON text." };

/** The wire fields (request-schema properties), as vLLM names them. */
export const structuredOutputsProperties = {
  structured_outputs: nullable({
    type: "object",
    properties: {
      json: jsonSchemaOrText,
      regex: { type: "string" },
      choice: { type: "array", minItems: 1, items: { type: "string" } },
      grammar: { type: "string", minLength: 1 },
      json_object: { type: "boolean" },
      disable_any_whitespace: { type: "boolean", description: "Accepted; JSON is always compact here." },
      disable_additional_properties: { type: "boolean" },
    },
    description:
      "Extension (vLLM's): exactly one of `json` (a JSON Schema), `regex` (the whole output matches it), `choice` (the output is one of the strings), `grammar` (EBNF as XGrammar reads it, with a `root` rule) or `json_object: true`. Enforced token by token.",
  }),
  guided_json: nullable({ ...jsonSchemaOrText, description: "Extension (vLLM's older form of structured_outputs.json)." }),
  guided_regex: nullable({ type: "string", description: "Extension (vLLM's older form of structured_outputs.regex)." }),
  guided_choice: nullable({ type: "array", minItems: 1, items: { type: "string" }, description: "Extension (vLLM's older form of structured_outputs.choice)." }),
  guided_grammar: nullable({ type: "string", minLength: 1, description: "Extension (vLLM's older form of structured_outputs.grammar)." }),
} as const;

const GUIDED = ["guided_json", "guided_regex", "guided_choice", "guided_grammar"] as const;
const KINDS = ["json", "regex", "choice", "grammar", "json_object"] as const;
/** structured_outputs options vLLM has that this server does not. */
const UNSUPPORTED = ["structural_tag", "whitespace_pattern"] as const;

function badRequest(loc: string[], message: string): ServingError {
  const param = loc.join(".");
  return new ServingError("ERR_VALIDATION", `${param}: ${message}`, { detail: [{ loc: ["body", ...loc], msg: message, type: "value_error" }] });
}

const given = (value: unknown) => value !== undefined && value !== null;

/** EBNF whose language is exactly the given strings (a literal's JSON escapes are XGrammar's too). */
export function choiceGrammar(choices: readonly string[]): string {
  return `root ::= ${[...new Set(choices)].map((choice) => JSON.stringify(choice)).join(" | ")}`;
}

/** One vLLM constraint kind's value as an engine constraint; `loc` names the field in errors. */
function constraintOfKind(kind: (typeof KINDS)[number], value: unknown, loc: string[]): GenerationConstraint | undefined {
  switch (kind) {
    case "json": {
      let schema = value;
      if (typeof value === "string") {
        try {
          schema = JSON.parse(value);
        } catch (err) {
          throw badRequest(loc, `is not JSON: ${(err as Error).message}`);
        }
        if (typeof schema !== "boolean" && (typeof schema !== "object" || schema === null || Array.isArray(schema))) {
          throw badRequest(loc, "must be a JSON Schema (an object)");
        }
      }
      return { type: "json_schema", schema: schema as Record<string, unknown> | boolean, strict: true };
    }
    case "regex":
      return { type: "regex", pattern: value as string };
    case "choice":
      return { type: "grammar", grammar: choiceGrammar(value as string[]) };
    case "grammar":
      return { type: "grammar", grammar: value as string };
    case "json_object":
      return value === true ? { type: "json_object" } : undefined;
  }
}

/** What structured_outputs asks for: exactly one kind. */
function constraintOfStructuredOutputs(value: Record<string, unknown>): GenerationConstraint {
  for (const option of UNSUPPORTED) {
    if (given(value[option])) throw badRequest(["structured_outputs", option], "is not supported by this server");
  }
  const kinds = KINDS.filter((kind) => (kind === "json_object" ? value[kind] === true : given(value[kind])));
  if (kinds.length !== 1) {
    const message = kinds.length === 0 ? `needs one of ${KINDS.join(", ")}` : `takes one of ${KINDS.join(", ")}, not ${kinds.join(" and ")}`;
    throw badRequest(["structured_outputs"], message);
  }
  const kind = kinds[0]!;
  return constraintOfKind(kind, value[kind], ["structured_outputs", kind])!;
}

/**
 * `{constraint}` when the body asks for one (response_format, structured_outputs or a
 * guided_* field), else nothing. `tools`: whether the request carries tools (a chat request
 * with a non-empty `tools`), which the vLLM forms do not combine with.
 */
export function constraintField(wire: Record<string, unknown>, options: { tools?: boolean } = {}): Pick<CompletionRequest, "constraint"> {
  const format = constraintOfResponseFormat(wire["response_format"]);
  const sources = [
    ...(format ? ["response_format"] : []),
    ...(given(wire["structured_outputs"]) ? ["structured_outputs"] : []),
    ...GUIDED.filter((field) => given(wire[field])),
  ];
  if (sources.length > 1) {
    throw badRequest([sources[1]!], `cannot be combined with ${sources[0]}: give one of response_format, structured_outputs and the guided_* fields`);
  }
  const source = sources[0];
  if (source === undefined) return {};
  if (source === "response_format") return { constraint: format! };
  if (options.tools) throw badRequest([source], "cannot be combined with tools (tool calls bring their own constraint)");
  const constraint =
    source === "structured_outputs"
      ? constraintOfStructuredOutputs(wire[source] as Record<string, unknown>)
      : constraintOfKind(source.slice("guided_".length) as (typeof KINDS)[number], wire[source], [source])!;
  return { constraint };
}
