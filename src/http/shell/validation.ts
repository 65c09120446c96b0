/**
 * Request validation that both apps share: schemas compiled once by ajv, ajv errors turned
 * into FastAPI-like `{loc, msg, type}` issues, and the 422 error carrying them. Each app turns
 * its validated wire fields into its own types (text/validation.ts, recsys/validation.ts).
 */
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import { ServingError } from "../../errors.js";
import type { JsonSchema } from "./schemas.js";

/** One violation, as listed under `detail` in a 422 body. */
export interface ValidationIssue {
  loc: (string | number)[];
  msg: string;
  type: string;
}

export type Location = "body" | "path" | "query";

// Types are strict (no coercion); defaults come from the schemas; every violation is listed.
const ajv = new Ajv2020({ allErrors: true, useDefaults: true, coerceTypes: false, allowUnionTypes: true });

export const compile = (schema: JsonSchema): ValidateFunction => ajv.compile(schema as Record<string, unknown>);

/** A 422 error carrying its issues. */
export function invalid(issues: ValidationIssue[]): ServingError {
  const summary = issues.map((issue) => `${issue.loc.join(".")}: ${issue.msg}`).join("; ");
  return new ServingError("ERR_VALIDATION", summary, { detail: issues });
}

export function check<T>(validate: ValidateFunction, data: unknown, where: Location): T {
  const issues: ValidationIssue[] = [];
  const value = tryCheck<T>(validate, data, where, issues);
  if (value === undefined) throw invalid(issues);
  return value;
}

export function tryCheck<T>(validate: ValidateFunction, data: unknown, where: Location, issues: ValidationIssue[]): T | undefined {
  if (validate(data)) return data as T;
  issues.push(...relevant(validate.errors ?? []).map((error) => toIssue(error, where)));
  return undefined;
}

/** ajv's anyOf/oneOf summary, or the failed null alternative of one: not what the client got wrong. */
const isAlternativeNoise = (error: ErrorObject): boolean =>
  error.keyword === "anyOf" || error.keyword === "oneOf" || (error.keyword === "type" && error.params["type"] === "null");

/**
 * ajv reports every alternative of an anyOf/oneOf that failed, then the anyOf itself: for
 * `max_tokens: -4` against "integer >= 1, or null", "should be >= 1; should be null; must match a
 * schema in anyOf". Where a value has a specific complaint, only that is reported (as FastAPI
 * does for an optional field); a value with nothing but those is reported as it is.
 */
function relevant(errors: readonly ErrorObject[]): ErrorObject[] {
  const specific = new Set(errors.filter((error) => !isAlternativeNoise(error)).map((error) => error.instancePath));
  return errors.filter((error) => !(isAlternativeNoise(error) && specific.has(error.instancePath)));
}

const TYPE_WORDS: Record<string, [words: string, kind: string]> = {
  integer: ["a valid integer", "int"],
  number: ["a valid number", "float"],
  string: ["a valid string", "string"],
  boolean: ["a valid boolean", "bool"],
  object: ["a JSON object", "dict"],
  array: ["a valid array", "list"],
  null: ["null", "none"],
};

function toIssue(error: ErrorObject, where: Location): ValidationIssue {
  const loc: (string | number)[] = [where, ...pointerSegments(error.instancePath)];
  const params = error.params as Record<string, unknown>;
  const limit = params["limit"];
  switch (error.keyword) {
    case "required":
      return { loc: [...loc, String(params["missingProperty"])], msg: "Field required", type: "missing" };
    case "type": {
      const types = String(params["type"]).split(",");
      const words = types.map((t) => TYPE_WORDS[t]?.[0] ?? t).join(" or ");
      return { loc, msg: `Input should be ${words}`, type: `${TYPE_WORDS[types[0]!]?.[1] ?? types[0]}_type` };
    }
    case "minLength":
      return { loc, msg: `String should have at least ${limit} character${limit === 1 ? "" : "s"}`, type: "string_too_short" };
    case "maxLength":
      return { loc, msg: `String should have at most ${limit} characters`, type: "string_too_long" };
    case "minItems":
      return { loc, msg: `List should have at least ${limit} item${limit === 1 ? "" : "s"}`, type: "too_short" };
    case "maxItems":
      return { loc, msg: `List should have at most ${limit} items`, type: "too_long" };
    case "minimum":
      return { loc, msg: `Input should be greater than or equal to ${limit}`, type: "greater_than_equal" };
    case "maximum":
      return { loc, msg: `Input should be less than or equal to ${limit}`, type: "less_than_equal" };
    case "exclusiveMinimum":
      return { loc, msg: `Input should be greater than ${limit}`, type: "greater_than" };
    case "exclusiveMaximum":
      return { loc, msg: `Input should be less than ${limit}`, type: "less_than" };
    default:
      return { loc, msg: error.message ?? "Invalid value", type: error.keyword };
  }
}

/** "/a/0/b~1c" -> ["a", 0, "b/c"] */
function pointerSegments(pointer: string): (string | number)[] {
  if (pointer === "") return [];
  return pointer
    .slice(1)
    .split("/")
    .map((segment) => segment.replace(/~1/g, "/").replace(/~0/g, "~"))
    .map((segment) => (/^(0|[1-9][0-9]*)$/.test(segment) ? Number(segment) : segment));
}
