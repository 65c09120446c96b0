/**
 * JSON Schema rewrites applied before XGrammar reads a schema, for what its 0.1.27 converter
 * gets wrong: the date and time formats as exact patterns (its own admit 2023-02-29, 2024-04-31
 * and a leap second at any minute), and required properties that `properties` does not list
 * (it lets them be left out).
 */

/** Keywords whose value is a schema, an array of schemas, or a map of schemas. */
const ONE = ["additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"];
const MANY = ["anyOf", "oneOf", "allOf", "prefixItems", "items"];
const MAP = ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/** The schema with `rewrite` applied to every object sub-schema, innermost first (copies; the input is untouched). */
export function mapSubschemas(schema: unknown, rewrite: (node: Record<string, unknown>) => Record<string, unknown>): unknown {
  const visit = (node: unknown): unknown => {
    if (typeof node !== "object" || node === null || Array.isArray(node)) return node;
    const copy: Record<string, unknown> = { ...(node as Record<string, unknown>) };
    for (const key of ONE) if (typeof copy[key] === "object" && copy[key] !== null && !Array.isArray(copy[key])) copy[key] = visit(copy[key]);
    for (const key of MANY) if (Array.isArray(copy[key])) copy[key] = (copy[key] as unknown[]).map(visit);
    for (const key of MAP) {
      const map = copy[key];
      if (typeof map === "object" && map !== null && !Array.isArray(map)) {
        copy[key] = Object.fromEntries(Object.entries(map).map(([name, sub]) => [name, visit(sub)]));
      }
    }
    return rewrite(copy);
  };
  return visit(schema);
}

const LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[048]|[2468][048]|[13579][26])00)";
const DATE =
  "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))" +
  `|${LEAP_YEAR}-02-29)`;
/** Seconds 00-59 (no leap second, which RFC 3339 allows only at 23:59:60 UTC), a zone always. */
const TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
const FORMAT_PATTERNS: Record<string, string> = { date: DATE, time: TIME, "date-time": `${DATE}T${TIME}` };

/** `format: date | time | date-time` as an exact `pattern` (when the schema has none). */
function exactFormat(node: Record<string, unknown>): Record<string, unknown> {
  const pattern = typeof node.format === "string" ? FORMAT_PATTERNS[node.format] : undefined;
  if (pattern === undefined || "pattern" in node) return node;
  const { format: _format, ...rest } = node;
  return { ...rest, pattern: `^${pattern}$` };
}

/**
 * A required property that `properties` does not list gets its entry: what
 * additionalProperties says of it (any value when it says nothing). With
 * `additionalProperties: false` no object fits unless patternProperties names it; that is left
 * as it is.
 */
function listRequired(node: Record<string, unknown>): Record<string, unknown> {
  if (!Array.isArray(node.required) || node.additionalProperties === false || "patternProperties" in node) return node;
  const properties = (typeof node.properties === "object" && node.properties !== null ? node.properties : {}) as Record<string, unknown>;
  const missing = (node.required as unknown[]).filter((name): name is string => typeof name === "string" && !(name in properties));
  if (missing.length === 0) return node;
  const value = typeof node.additionalProperties === "object" && node.additionalProperties !== null ? node.additionalProperties : {};
  return { ...node, properties: { ...properties, ...Object.fromEntries(missing.map((name) => [name, value])) } };
}

/**
 * Keywords XGrammar 0.1.27 accepts and does not enforce (acceptance probes against ajv, see
 * docs/openai.md): a schema using one is refused rather than answered with output that may
 * fail it, as vLLM refuses schemas its XGrammar backend cannot hold. `oneOf` is read as
 * `anyOf` (exact for disjoint branches such as discriminated unions) and stays accepted, as do
 * `allOf` of one sub-schema and `uniqueItems: false`.
 */
const UNENFORCED = ["multipleOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "contains", "minContains", "maxContains"];

/** The first keyword of the schema that a constraint could not enforce, with its path; undefined when none. */
export function unenforcedKeyword(schema: unknown): string | undefined {
  const walk = (node: unknown, path: string): string | undefined => {
    if (typeof node !== "object" || node === null || Array.isArray(node)) return undefined;
    const object = node as Record<string, unknown>;
    const named = UNENFORCED.find((key) => key in object);
    if (named !== undefined) return `${path}/${named}`;
    if (object.uniqueItems === true) return `${path}/uniqueItems`;
    if (Array.isArray(object.allOf) && object.allOf.length > 1) return `${path}/allOf`;
    for (const [step, child] of subschemas(object)) {
      const found = walk(child, `${path}${step}`);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return walk(schema, "");
}

/** The sub-schemas directly under a schema object, each with its path step (`/items`, `/anyOf/1`, `/properties/a`). */
function subschemas(object: Record<string, unknown>): Array<[string, unknown]> {
  const children: Array<[string, unknown]> = [];
  for (const key of ONE) {
    const value = object[key];
    if (typeof value === "object" && value !== null && !Array.isArray(value)) children.push([`/${key}`, value]);
  }
  for (const key of MANY) {
    const value = object[key];
    if (Array.isArray(value)) value.forEach((item, i) => children.push([`/${key}/${i}`, item]));
  }
  for (const key of MAP) {
    const map = object[key];
    if (typeof map === "object" && map !== null && !Array.isArray(map)) {
      for (const [name, sub] of Object.entries(map)) children.push([`/${key}/${name}`, sub]);
    }
  }
  return children;
}

/** The schema with the rewrites above applied to every sub-schema. */
export function rewriteForXGrammar(schema: unknown): unknown {
  return mapSubschemas(schema, (node) => listRequired(exactFormat(node)));
}

/**
 * How deep the schema's sub-schemas nest, following local `$ref`s (a cycle counts once):
 * XGrammar 0.1.27's WebAssembly build overflows its stack on deep schemas (an array nested 80
 * levels, a chain of 50 `$ref`s) and is then unusable for every later compile, so deep
 * schemas are refused before it sees them.
 */
export function schemaDepth(schema: unknown, limit = Infinity): number {
  const root = schema;
  const resolved = new Map<string, number>();
  let level = 0;
  const depth = (node: unknown, refs: Set<string>): number => {
    if (typeof node !== "object" || node === null || Array.isArray(node)) return 0;
    if (level > limit) return 1; // deep enough to refuse: the rest is not walked
    level++;
    try {
      return 1 + below(node, refs);
    } finally {
      level--;
    }
  };
  const below = (node: object, refs: Set<string>): number => {
    let deepest = 0;
    const object = node as Record<string, unknown>;
    for (const [, child] of subschemas(object)) deepest = Math.max(deepest, depth(child, refs));
    const ref = object.$ref;
    if (typeof ref === "string" && ref.startsWith("#") && !refs.has(ref)) {
      let target = resolved.get(ref);
      if (target === undefined) {
        const next = new Set(refs).add(ref);
        target = depth(pointer(root, ref), next);
        resolved.set(ref, target);
      }
      deepest = Math.max(deepest, target);
    }
    return deepest;
  };
  return depth(schema, new Set());
}

/** The value a local JSON pointer (`#/$defs/a`) names in the schema; undefined when none. */
function pointer(root: unknown, ref: string): unknown {
  let node = root;
  for (const part of ref.slice(1).split("/").filter((piece) => piece !== "")) {
    const key = decodeURIComponent(part).replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}
