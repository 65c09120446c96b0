/**
 * Grammar compilation for constrained decoding, on XGrammar (the engine vLLM, SGLang and
 * TensorRT-LLM use; here its WebAssembly build). One ConstraintCompiler per model holds the
 * vocabulary's TokenizerInfo (built once) and the compiled grammars, cached by constraint;
 * each constrained choice gets its own RowMatcher, which turns the tokens sampled so far into
 * the bitmask of the tokens allowed next.
 *
 * JSON Schemas and "any JSON object" compile to the compact form (no free whitespace, one
 * line: `{"a": 1, "b": [true]}`): a model that does not know JSON could otherwise spend its
 * tokens on whitespace, and the compact form is what clients parse anyway.
 */
import { Ajv2020 } from "ajv/dist/2020.js";

import type { GenerationConstraint } from "../../types.js";
import { fillNumericBounds, spliceNumericBounds } from "./numericBounds.js";
import { rewriteForXGrammar, schemaDepth, unenforcedKeyword } from "./schemaRewrite.js";
import { refusedTokenMask, secondByteRange, tokenBytes, type Vocabulary } from "./vocabulary.js";
import { withXGrammarErrors, xgrammar } from "./xgrammar.js";

import type { CompiledGrammar, GrammarCompiler, GrammarMatcher } from "@mlc-ai/web-xgrammar";

/** A constraint that cannot be compiled: the client's mistake, with the reason. */
export class ConstraintError extends Error {}

/** Most compiled grammars kept per model (least recently used go first). */
const CACHE_SIZE = 256;

const metaValidator = new Ajv2020({ strict: false, validateSchema: true, allErrors: false });

export class ConstraintCompiler {
  private readonly cache = new Map<string, Promise<CompiledGrammar>>();
  /** Tokens refused in JSON (control characters, invalid UTF-8; LF allowed in tool-call tags); built on first use. */
  private refusals: { bytes?: Uint8Array[]; json?: Int32Array; tagged?: Int32Array } = {};

  private constructor(
    private readonly compiler: GrammarCompiler,
    readonly vocabulary: Vocabulary,
  ) {}

  static async create(vocabulary: Vocabulary): Promise<ConstraintCompiler> {
    const xg = xgrammar();
    const info = await xg.TokenizerInfo.createTokenizerInfo(vocabulary.tokens, vocabulary.type, false, vocabulary.size, vocabulary.stopTokenIds);
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, true);
    return new ConstraintCompiler(compiler, vocabulary);
  }

  /** The constraint's grammar, compiled once; rejects with a ConstraintError naming the problem. */
  compile(constraint: GenerationConstraint): Promise<CompiledGrammar> {
    const key = JSON.stringify(constraint);
    let compiled = this.cache.get(key);
    if (compiled) {
      this.cache.delete(key);
      this.cache.set(key, compiled);
      return compiled;
    }
    // A matcher made (and let go) once per grammar, so that one that cannot be made fails this
    // request before it joins a batch (prepareConstraint), never the batch it would have joined.
    compiled = this.compileNow(constraint).then(async (grammar) => {
      try {
        (await this.newMatcher(grammar)).dispose();
      } catch (err) {
        grammar.dispose();
        throw new Error(`no grammar matcher for ${describe(constraint)} over this model's vocabulary: ${(err as Error).message}`);
      }
      return grammar;
    });
    this.cache.set(key, compiled);
    compiled.catch(() => this.cache.delete(key));
    while (this.cache.size > CACHE_SIZE) {
      const oldest = this.cache.keys().next().value as string;
      void this.cache.get(oldest)?.then((grammar) => grammar.dispose(), () => {});
      this.cache.delete(oldest);
    }
    return compiled;
  }

  private async compileNow(constraint: GenerationConstraint): Promise<CompiledGrammar> {
    checkDepth(constraint);
    if (constraint.type === "json_schema" || constraint.type === "tagged_json") checkSchema(constraint.schema);
    try {
      return await withXGrammarErrors(() => {
        switch (constraint.type) {
          case "json_object":
            return this.compiler.compileJSONSchema(JSON.stringify({ type: "object" }), false, -1, [", ", ": "], false);
          case "json_schema":
            return schemaGrammar(constraint.schema, constraint.strict !== false).then((grammar) =>
              "ebnf" in grammar
                ? this.compiler.compileGrammar(grammar.ebnf)
                : this.compiler.compileJSONSchema(JSON.stringify(grammar.schema), false, -1, [", ", ": "], constraint.strict !== false),
            );
          case "regex":
            return this.compiler.compileStructuralTag({ type: "structural_tag", format: { type: "regex", pattern: constraint.pattern } });
          case "grammar":
            return this.compiler.compileGrammar(constraint.grammar);
          case "tagged_json":
            return taggedJsonGrammar(constraint).then((ebnf) => this.compiler.compileGrammar(ebnf));
          default:
            throw new Error(`unknown constraint type ${JSON.stringify((constraint as { type?: unknown }).type)}`);
        }
      });
    } catch (err) {
      throw new ConstraintError(`${describe(constraint)} cannot be compiled: ${(err as Error).message}`);
    }
  }

  private newMatcher(grammar: CompiledGrammar): Promise<GrammarMatcher> {
    // A model without an end-of-sequence token (no stop ids): XGrammar aborts its WebAssembly
    // module on an empty override list, so none is given and the matcher ends the choice itself
    // once the grammar is complete (next(): `complete`).
    const stops = this.vocabulary.stopTokenIds;
    return xgrammar().GrammarMatcher.createGrammarMatcher(grammar, stops.length > 0 ? stops : undefined, stops.length === 0);
  }

  /** A fresh matcher for one choice. */
  async matcher(constraint: GenerationConstraint): Promise<RowMatcher> {
    const grammar = await this.compile(constraint);
    const matcher = await this.newMatcher(grammar);
    const json = constraint.type === "json_object" || constraint.type === "json_schema" || constraint.type === "tagged_json";
    if (!json) return new RowMatcher(matcher, this.vocabulary.stopTokenIds);
    const bytes = (this.refusals.bytes ??= tokenBytes(this.vocabulary));
    const refused =
      constraint.type === "tagged_json"
        ? (this.refusals.tagged ??= refusedTokenMask(this.vocabulary, bytes, [0x0a]))
        : (this.refusals.json ??= refusedTokenMask(this.vocabulary, bytes));
    return new RowMatcher(matcher, this.vocabulary.stopTokenIds, { refused, bytes });
  }
}

/** One choice's grammar state. */
export class RowMatcher {
  private disposed = false;

  constructor(
    private readonly matcher: GrammarMatcher,
    private readonly stopTokenIds: readonly number[],
    /** JSON's extra rules: tokens refused whatever the grammar says (bit set), and each token's bytes. */
    private readonly utf8?: { refused: Int32Array; bytes: readonly Uint8Array[] },
  ) {}

  /** The output's last byte when it is a lead byte whose second byte is restricted (E0, ED, F0, F4). */
  private lead = 0;

  /**
   * The tokens allowed next; `complete` when the grammar is complete and allows nothing but an
   * end (the choice ends there, whether or not the model has an end-of-sequence token).
   */
  async next(): Promise<{ mask: Int32Array; complete: boolean }> {
    const mask = await this.matcher.getNextTokenBitmask();
    if (this.utf8) {
      const refused = this.utf8.refused;
      for (let w = 0; w < mask.length; w++) mask[w]! &= ~(refused[w] ?? 0);
      if (this.lead !== 0) {
        // A character split across tokens: its second byte must be in the lead's range.
        const [lo, hi] = secondByteRange(this.lead);
        for (let w = 0; w < mask.length; w++) {
          for (let bits = mask[w]!; bits !== 0; bits &= bits - 1) {
            const bit = 31 - Math.clz32(bits & -bits);
            const first = this.utf8.bytes[w * 32 + bit]?.[0];
            if (first !== undefined && (first < lo || first > hi)) mask[w]! &= ~(1 << bit);
          }
        }
      }
    }
    const probe = mask.slice();
    for (const id of this.stopTokenIds) probe[id >> 5] = (probe[id >> 5] ?? 0) & ~(1 << (id & 31));
    return { mask, complete: !probe.some((word: number) => word !== 0) };
  }

  /** Advances by a sampled token; false when the grammar does not accept it. */
  accept(token: number): boolean {
    if (this.utf8) {
      const bytes = this.utf8.bytes[token];
      const last = bytes && bytes.length > 0 ? bytes[bytes.length - 1]! : 0;
      this.lead = last === 0xe0 || last === 0xed || last === 0xf0 || last === 0xf4 ? last : 0;
    }
    return this.matcher.acceptToken(token);
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.matcher.dispose();
  }
}

function describe(constraint: GenerationConstraint): string {
  switch (constraint.type) {
    case "json_object":
      return "the JSON object grammar";
    case "json_schema":
      return "the JSON Schema";
    case "regex":
      return "the regular expression";
    case "grammar":
      return "the grammar";
    case "tagged_json":
      return "the tool-call format";
    default:
      return "the constraint";
  }
}

/**
 * Most nesting XGrammar is given: its WebAssembly build overflows its stack past ~140
 * parentheses in a grammar or regex and ~60 levels of schema (less through `$ref` chains),
 * and is then unusable for every later compile of the process. Real grammars and schemas stay
 * far below these.
 */
export const MAX_GROUP_DEPTH = 64;
export const MAX_SCHEMA_DEPTH = 32;

function checkDepth(constraint: GenerationConstraint): void {
  if (constraint.type === "regex" || constraint.type === "grammar") {
    const text = constraint.type === "regex" ? constraint.pattern : constraint.grammar;
    let depth = 0;
    let deepest = 0;
    for (const char of text) {
      if (char === "(") deepest = Math.max(deepest, ++depth);
      else if (char === ")") depth--;
    }
    if (deepest > MAX_GROUP_DEPTH) {
      throw new ConstraintError(`${describe(constraint)} nests ${deepest} parentheses deep; at most ${MAX_GROUP_DEPTH} are supported`);
    }
  } else if (constraint.type === "json_schema" || constraint.type === "tagged_json") {
    const depth = schemaDepth(constraint.schema, MAX_SCHEMA_DEPTH);
    if (depth > MAX_SCHEMA_DEPTH) {
      throw new ConstraintError(`${describe(constraint)} nests more than ${MAX_SCHEMA_DEPTH} levels deep (through $ref too), which is not supported`);
    }
    const unenforced = unenforcedKeyword(constraint.schema);
    if (unenforced !== undefined) {
      throw new ConstraintError(`${describe(constraint)} uses ${unenforced}, which structured output cannot enforce (docs/openai.md lists what it can)`);
    }
  }
}

/** A JSON Schema that is not one (by the 2020-12 meta-schema) is refused with ajv's reason. */
function checkSchema(schema: unknown): void {
  if (typeof schema === "boolean") return;
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw new ConstraintError("the JSON Schema must be an object");
  }
  const copy = { ...(schema as Record<string, unknown>) };
  delete copy.$schema; // draft-07 schemas are read as 2020-12: the keywords used here agree
  if (!metaValidator.validateSchema(copy)) {
    const first = metaValidator.errors?.[0];
    throw new ConstraintError(`the JSON Schema is invalid: ${first ? `${first.instancePath || "/"} ${first.message}` : "rejected"}`);
  }
}

/**
 * What XGrammar compiles for a schema, with what it gets wrong rewritten first (schemaRewrite.ts): the schema itself when it has no numeric bounds, else its
 * EBNF (compact form) with exact bounds spliced in (numericBounds.ts); always the EBNF with
 * `ebnfAlways`.
 */
async function schemaGrammar(schema: unknown, strict: boolean, ebnfAlways = false): Promise<{ schema: unknown } | { ebnf: string }> {
  const spliced = spliceNumericBounds(rewriteForXGrammar(schema)); // throws when no value fits a sub-schema's bounds
  if (spliced.rules.size === 0 && !ebnfAlways) return { schema: spliced.schema };
  const ebnf = await xgrammar().Testings._jsonSchemaToEBNF(JSON.stringify(spliced.schema), false, -1, [", ", ": "], strict);
  return { ebnf: spliced.rules.size === 0 ? ebnf : fillNumericBounds(ebnf, spliced.rules) };
}

/**
 * EBNF of a tagged_json constraint: the schema's EBNF (compact form), its `root` renamed,
 * inside the tags.
 */
async function taggedJsonGrammar(constraint: Extract<GenerationConstraint, { type: "tagged_json" }>): Promise<string> {
  const grammar = await schemaGrammar(constraint.schema, true, true);
  const schema = "ebnf" in grammar ? grammar.ebnf : "";
  const body = schema.replace(/\broot\b/g, "tagged_json_body");
  const literal = (text: string) => (text === "" ? "" : `${JSON.stringify(text)} `);
  const one = `${literal(constraint.begin)}tagged_json_body ${literal(constraint.end)}`.trim();
  const root = constraint.repeat ? `root ::= tagged_json_one (${literal(constraint.separator ?? "")}tagged_json_one)*` : "root ::= tagged_json_one";
  return `${root}\ntagged_json_one ::= ${one}\n${body}`;
}
