/**
 * Exact JSON Schema numeric bounds for XGrammar. Its JSON Schema converter (0.1.27, the npm
 * build) bounds integers and numbers loosely (`maximum: 120` admits 121-129, `exclusiveMaximum:
 * 3` admits 3), so a schema's bounded `integer`/`number` sub-schemas are taken out before it
 * sees them (each replaced by a placeholder `const`) and the placeholders in its EBNF are then
 * replaced by rules built here: the classic numeric-range-to-regular-expression construction,
 * digit by digit, on the bounds' exact decimal text.
 *
 * The accepted text: integers as `0` or `-?[1-9][0-9]*` (no `-0`, no exponent); numbers as an
 * integer part, then optionally `.` and 1 to FRACTION_DIGITS digits (more when a bound itself
 * has more), never an exponent. Every such text that the rule accepts is within the bounds
 * when read as an exact decimal, and so as a double too for inclusive bounds (rounding is
 * monotonic); an exclusive bound can still be met by a text that differs from it only beyond a
 * double's ~16 significant digits.
 */

import { mapSubschemas } from "./schemaRewrite.js";

/** Fraction digits a bounded number may have. */
export const FRACTION_DIGITS = 15;
/**
 * Integer digits a bounded value may have. Rules for longer bounds grow deep enough to make
 * XGrammar's compile slow (seconds at 300 digits) or crash it, so a bound beyond +-10^15 is
 * taken as +-10^15 (the values admitted are a subset of the schema's) and a bound that needs
 * longer values (minimum 1e20) is refused. Fraction digits likewise: a bound is rounded inward
 * to FRACTION_DIGITS.
 */
export const INTEGER_DIGITS = 15;

const BOUND_KEYWORDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;
const MARKER = "xgrammar_bound_7c1e_";

/** A non-negative decimal: its integer part and its fraction digits (no trailing zeros). */
interface Magnitude {
  int: bigint;
  frac: string;
}
interface Bound {
  negative: boolean;
  value: Magnitude;
  strict: boolean;
}

/** The bounds of a sub-schema, in the form the rules are built from. */
export interface NumericBounds {
  integer: boolean;
  lower?: Bound;
  upper?: Bound;
}

/** A number's exact shortest decimal text, split; `1e21` and `5e-7` are expanded. */
function decimalOf(value: number): { negative: boolean; value: Magnitude } {
  const negative = value < 0;
  const [mantissa = "0", exponentText] = Math.abs(value).toString().split("e");
  const exponent = exponentText === undefined ? 0 : Number(exponentText);
  const [intDigits = "0", fracDigits = ""] = mantissa.split(".");
  let digits = intDigits + fracDigits;
  let point = intDigits.length + exponent;
  if (point < 0) {
    digits = "0".repeat(-point) + digits;
    point = 0;
  }
  if (point > digits.length) digits += "0".repeat(point - digits.length);
  const int = BigInt(digits.slice(0, point) || "0");
  const frac = digits.slice(point).replace(/0+$/, "");
  return { negative: negative && (int !== 0n || frac !== ""), value: { int, frac } };
}

function isZero(m: Magnitude): boolean {
  return m.int === 0n && m.frac === "";
}

/** Compares two signed decimals. */
function compareSigned(a: { negative: boolean; value: Magnitude }, b: { negative: boolean; value: Magnitude }): number {
  if (a.negative !== b.negative) return a.negative ? -1 : 1;
  const magnitude = compareMagnitude(a.value, b.value);
  return a.negative ? -magnitude : magnitude;
}

function compareMagnitude(a: Magnitude, b: Magnitude): number {
  if (a.int !== b.int) return a.int < b.int ? -1 : 1;
  const width = Math.max(a.frac.length, b.frac.length);
  const fa = a.frac.padEnd(width, "0");
  const fb = b.frac.padEnd(width, "0");
  return fa === fb ? 0 : fa < fb ? -1 : 1;
}

// ---- EBNF pieces -----------------------------------------------------------------------

const digitClass = (from: number, to: number) => (from === to ? `"${from}"` : `[${from}-${to}]`);
const anyDigits = (count: number) => (count === 0 ? "" : count === 1 ? "[0-9]" : `[0-9]{${count}}`);
const alternatives = (parts: string[]): string | null => (parts.length === 0 ? null : parts.length === 1 ? parts[0]! : `(${parts.join(" | ")})`);
const sequence = (...parts: string[]) => parts.filter((part) => part !== "").join(" ") || '""';

/** Digit strings of a's length between a and b (a <= b, same length). */
function sameLength(a: string, b: string): string {
  if (a.length === 0) return "";
  const first = Number(a[0]);
  const last = Number(b[0]);
  if (first === last) return sequence(`"${first}"`, sameLength(a.slice(1), b.slice(1)));
  const rest = a.length - 1;
  const parts: string[] = [];
  // a's first digit, then at least a's rest; b's first digit, then at most b's rest; between, anything.
  const lowFree = /^0*$/.test(a.slice(1));
  const highFree = /^9*$/.test(b.slice(1));
  const from = lowFree ? first : first + 1;
  const to = highFree ? last : last - 1;
  if (!lowFree) parts.push(sequence(`"${first}"`, atLeast(a.slice(1))));
  if (from <= to) parts.push(sequence(digitClass(from, to), anyDigits(rest)));
  if (!highFree) parts.push(sequence(`"${last}"`, atMost(b.slice(1))));
  return alternatives(parts)!;
}

/** Digit strings of s's length that are >= s. */
function atLeast(s: string): string {
  if (/^0*$/.test(s)) return anyDigits(s.length);
  const first = Number(s[0]);
  const parts = [sequence(`"${first}"`, atLeast(s.slice(1)))];
  if (first < 9) parts.push(sequence(digitClass(first + 1, 9), anyDigits(s.length - 1)));
  return alternatives(parts)!;
}

/** Digit strings of s's length that are <= s. */
function atMost(s: string): string {
  if (/^9*$/.test(s)) return anyDigits(s.length);
  const first = Number(s[0]);
  const parts = [sequence(`"${first}"`, atMost(s.slice(1)))];
  if (first > 0) parts.push(sequence(digitClass(0, first - 1), anyDigits(s.length - 1)));
  return alternatives(parts)!;
}

/** Canonical non-negative integers (no leading zeros) from `low` to `high` (undefined: no end); null when none. */
export function integerRange(low: bigint, high: bigint | undefined): string | null {
  if (high !== undefined && low > high) return null;
  const lowText = low.toString();
  const highText = high?.toString();
  const parts: string[] = [];
  const longest = highText?.length ?? lowText.length;
  for (let length = lowText.length; length <= longest; length++) {
    const from = length === lowText.length ? lowText : `1${"0".repeat(length - 1)}`;
    const to = highText !== undefined && length === highText.length ? highText : "9".repeat(length);
    if (BigInt(from) <= BigInt(to)) parts.push(sameLength(from, to));
  }
  if (high === undefined) parts.push(sequence("[1-9]", anyDigits(lowText.length), "[0-9]*"));
  return alternatives(parts);
}

/**
 * Fraction digit strings D (at most `budget` digits) with low (<|<=) 0.D (<|<=) high, where
 * low and high are the remaining fraction digits of the bounds ("" is zero; null: no bound).
 * `empty`: whether no digits at all (the value 0) fits; `digits`: the rule for one or more.
 */
function fraction(
  low: string | null,
  lowStrict: boolean,
  high: string | null,
  highStrict: boolean,
  budget: number,
): { empty: boolean; digits: string | null } {
  if (low === "" && !lowStrict) low = null; // >= 0 holds for every fraction
  const empty = low === null && (high === null || high !== "" || !highStrict);
  if (budget === 0) return { empty, digits: null };
  if (low === null && high === null) return { empty, digits: budget === 1 ? "[0-9]" : `[0-9]{1,${budget}}` };
  const lowDigit = low === null ? 0 : low === "" ? 0 : Number(low[0]);
  const highDigit = high === null ? 9 : high === "" ? 0 : Number(high[0]);
  const tail = budget - 1 === 0 ? "" : `[0-9]{0,${budget - 1}}`;
  const parts: string[] = [];
  let freeFrom = -1;
  const flushFree = (to: number) => {
    if (freeFrom >= 0) parts.push(sequence(digitClass(freeFrom, to), tail));
    freeFrom = -1;
  };
  for (let digit = lowDigit; digit <= highDigit; digit++) {
    const tightLow = low !== null && digit === lowDigit;
    const tightHigh = high !== null && digit === highDigit;
    if (!tightLow && !tightHigh) {
      if (freeFrom < 0) freeFrom = digit;
      continue;
    }
    flushFree(digit - 1);
    const rest = fraction(tightLow ? low!.slice(1) : null, lowStrict, tightHigh ? high!.slice(1) : null, highStrict, budget - 1);
    if (rest.empty) parts.push(rest.digits === null ? `"${digit}"` : sequence(`"${digit}"`, `(${rest.digits})?`));
    else if (rest.digits !== null) parts.push(sequence(`"${digit}"`, rest.digits));
  }
  flushFree(highDigit);
  return { empty, digits: alternatives(parts) };
}

/** An integer part and the fractions that may follow it. */
function withFraction(integerPart: string, frac: { empty: boolean; digits: string | null }): string | null {
  if (frac.digits === null) return frac.empty ? integerPart : null;
  const dotted = sequence('"."', frac.digits);
  return frac.empty ? sequence(integerPart, `(${dotted})?`) : sequence(integerPart, dotted);
}

/** Non-negative values (their text, no sign) between the magnitudes `low` (none: 0 inclusive) and `high` (none: unbounded). */
function magnitudeRange(
  integer: boolean,
  low: { value: Magnitude; strict: boolean } | undefined,
  high: { value: Magnitude; strict: boolean } | undefined,
  budget: number,
): string | null {
  if (integer) {
    const from = low === undefined ? 0n : low.value.frac !== "" || low.strict ? low.value.int + 1n : low.value.int;
    const to = high === undefined ? undefined : high.value.frac === "" && high.strict ? high.value.int - 1n : high.value.int;
    return integerRange(from, to);
  }
  const lowInt = low?.value.int ?? 0n;
  const highInt = high?.value.int;
  const literal = (n: bigint) => `"${n}"`;
  const parts: (string | null)[] = [];
  if (highInt !== undefined && lowInt === highInt) {
    parts.push(withFraction(literal(lowInt), fraction(low?.value.frac ?? null, low?.strict ?? false, high!.value.frac, high!.strict, budget)));
  } else {
    parts.push(withFraction(literal(lowInt), fraction(low?.value.frac ?? null, low?.strict ?? false, null, false, budget)));
    const middle = integerRange(lowInt + 1n, highInt === undefined ? undefined : highInt - 1n);
    if (middle !== null) parts.push(withFraction(middle, fraction(null, false, null, false, budget)));
    if (highInt !== undefined) parts.push(withFraction(literal(highInt), fraction(null, false, high!.value.frac, high!.strict, budget)));
  }
  return alternatives(parts.filter((part): part is string => part !== null));
}

/** The EBNF of the values within the bounds; null when none is. */
export function boundedNumberRule(bounds: NumericBounds): string | null {
  const { lower, upper } = bounds;
  const budget = FRACTION_DIGITS;
  const zero = { negative: false, value: { int: 0n, frac: "" } };
  const parts: string[] = [];
  // Zero and above: from max(lower, 0) to upper.
  if (upper === undefined || compareSigned(upper, zero) > 0 || (isZero(upper.value) && !upper.strict)) {
    const low = lower === undefined || lower.negative ? undefined : lower;
    const rule = magnitudeRange(bounds.integer, low, upper, budget);
    if (rule !== null) parts.push(rule);
  }
  // Below zero: "-" and a magnitude above max(-upper, 0) up to -lower.
  if (lower === undefined || lower.negative) {
    const low = upper === undefined || !upper.negative ? { value: { int: 0n, frac: "" }, strict: true } : upper;
    const rule = magnitudeRange(bounds.integer, low, lower, budget);
    if (rule !== null) parts.push(sequence('"-"', rule));
  }
  return alternatives(parts);
}

// ---- the schema side -----------------------------------------------------------------------

/** The bounds of a sub-schema of type integer/number with at least one bound keyword; undefined otherwise. */
function boundsOf(schema: Record<string, unknown>, integer: boolean): NumericBounds | undefined {
  const present = BOUND_KEYWORDS.filter((key) => typeof schema[key] === "number" && Number.isFinite(schema[key]));
  if (present.length === 0) return undefined;
  const bound = (key: (typeof BOUND_KEYWORDS)[number], strict: boolean): Bound | undefined =>
    typeof schema[key] === "number" && Number.isFinite(schema[key]) ? { ...decimalOf(schema[key] as number), strict } : undefined;
  // Of an inclusive and an exclusive bound on one side, the tighter one holds.
  const tighter = (a: Bound | undefined, b: Bound | undefined, sign: 1 | -1): Bound | undefined => {
    if (!a || !b) return a ?? b;
    const order = compareSigned(a, b) * sign;
    return order > 0 ? a : order < 0 ? b : a.strict ? a : b;
  };
  const lower = tighter(bound("minimum", false), bound("exclusiveMinimum", true), 1);
  const upper = tighter(bound("maximum", false), bound("exclusiveMaximum", true), -1);
  return { integer, lower: lower && inward(lower, "lower"), upper: upper && inward(upper, "upper") };
}

const LIMIT: Magnitude = { int: 10n ** BigInt(INTEGER_DIGITS), frac: "" };

/**
 * A bound within what the rules spell (|value| < 10^INTEGER_DIGITS, FRACTION_DIGITS fraction
 * digits), moved inward when it is not: the values it then admits are a subset.
 */
function inward(bound: Bound, side: "lower" | "upper"): Bound {
  // A lower bound pulls up, an upper bound pulls down: toward zero on a magnitude when the
  // bound's sign points inward, away from it otherwise.
  const towardZero = (side === "lower") === bound.negative;
  if (compareMagnitude(bound.value, LIMIT) >= 0) {
    if (!towardZero) throw new RangeError(`bounds beyond ${side === "lower" ? "" : "-"}1e${INTEGER_DIGITS} are not supported`);
    return { negative: bound.negative, value: LIMIT, strict: true };
  }
  if (bound.value.frac.length <= FRACTION_DIGITS) return bound;
  const kept = bound.value.frac.slice(0, FRACTION_DIGITS);
  if (towardZero) {
    const value = { int: bound.value.int, frac: kept.replace(/0+$/, "") };
    return { negative: bound.negative && !isZero(value), value, strict: false };
  }
  // Away from zero: the kept digits plus one unit in the last place.
  const scaled = BigInt(bound.value.int.toString() + kept) + 1n;
  const text = scaled.toString().padStart(FRACTION_DIGITS + 1, "0");
  const value = { int: BigInt(text.slice(0, -FRACTION_DIGITS)), frac: text.slice(-FRACTION_DIGITS).replace(/0+$/, "") };
  return { negative: bound.negative, value, strict: false };
}

const NUMERIC = new Set(["integer", "number"]);

/**
 * The schema with every bounded integer/number sub-schema replaced by a placeholder, and the
 * rule for each placeholder; `rules` is empty when the schema has no bounds (it is then
 * returned as it was). Throws (RangeError) on bounds no value fits.
 */
export function spliceNumericBounds(schema: unknown): { schema: unknown; rules: Map<string, string> } {
  const rules = new Map<string, string>();
  const replaceBounded = (node: Record<string, unknown>): Record<string, unknown> => {
    // enum/const decide the values themselves; combinators keep XGrammar's reading.
    if ("enum" in node || "const" in node || "$ref" in node || "anyOf" in node || "oneOf" in node || "allOf" in node) return node;
    const types = typeof node.type === "string" ? [node.type] : Array.isArray(node.type) ? (node.type as unknown[]) : [];
    const numeric = types.filter((type) => NUMERIC.has(type as string));
    if (numeric.length === 0) return node;
    const bounds = boundsOf(node, !numeric.includes("number"));
    if (bounds === undefined) return node;
    const rule = boundedNumberRule(bounds);
    if (rule === null) throw new RangeError(`no ${bounds.integer ? "integer" : "number"} fits the bounds ${JSON.stringify(Object.fromEntries(BOUND_KEYWORDS.filter((key) => key in node).map((key) => [key, node[key]])))}`);
    const marker = `${MARKER}${rules.size}`;
    rules.set(marker, rule);
    const placeholder = { const: marker };
    const others = types.filter((type) => !NUMERIC.has(type as string));
    if (others.length === 0) return placeholder;
    const rest: Record<string, unknown> = { ...node, type: others.length === 1 ? others[0] : others };
    for (const key of BOUND_KEYWORDS) delete rest[key];
    return { anyOf: [placeholder, rest] };
  };
  const rewritten = mapSubschemas(schema, replaceBounded);
  return rules.size === 0 ? { schema, rules } : { schema: rewritten, rules };
}

/** XGrammar's EBNF of the rewritten schema with each placeholder's literal replaced by its rule. */
export function fillNumericBounds(ebnf: string, rules: Map<string, string>): string {
  let filled = ebnf;
  const added: string[] = [];
  for (const [marker, rule] of rules) {
    const name = `${marker}rule`;
    filled = filled.split(`"\\"${marker}\\""`).join(name);
    added.push(`${name} ::= ${rule}`);
  }
  if (new RegExp(`${MARKER}\\d+(?![\\drule])`).test(filled)) {
    throw new Error("internal: a numeric bound's placeholder was not found in the grammar");
  }
  return `${filled}\n${added.join("\n")}\n`;
}
