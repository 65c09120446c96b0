/**
 * How tokens are chosen, declared once. SAMPLING_SETTINGS names each setting beyond
 * temperature and top_k on the wire and in TypeScript, with its valid values as JSON Schema:
 * SamplingSettings' optional fields are derived from it, the HTTP schemas embed its schemas
 * (src/http/text/schemas.ts `samplingProperties`, shared by /generate and /v1), validation
 * reads wire bodies with it, and the engine copies the same fields to the addon's sampler
 * (native/runtime/Sampler.h, read by native/binding/JsArgs.cc ParseSamplingSettings). A new setting is one
 * entry here, then its C++ (and Python reference). docs/openai.md gives the order in which
 * they apply.
 */
export const SAMPLING_SETTINGS = {
  seed: {
    name: "seed",
    schema: {
      type: "integer",
      minimum: 0,
      maximum: Number.MAX_SAFE_INTEGER,
      description: "Extension: makes sampling reproducible (with n > 1, choice i draws with seed + i).",
    },
  },
  top_p: {
    name: "topP",
    schema: {
      type: "number",
      exclusiveMinimum: 0,
      maximum: 1,
      description: "Extension: sample among the most likely tokens whose probabilities first reach top_p.",
    },
  },
  min_p: {
    name: "minP",
    schema: {
      type: "number",
      minimum: 0,
      maximum: 1,
      description: "Extension: drop tokens less likely than min_p times the most likely one.",
    },
  },
  presence_penalty: {
    name: "presencePenalty",
    schema: {
      type: "number",
      minimum: -2,
      maximum: 2,
      description: "Extension: subtracted from the logit of every token generated so far.",
    },
  },
  frequency_penalty: {
    name: "frequencyPenalty",
    schema: {
      type: "number",
      minimum: -2,
      maximum: 2,
      description: "Extension: subtracted from a token's logit once per time it was generated.",
    },
  },
  repetition_penalty: {
    name: "repetitionPenalty",
    schema: {
      type: "number",
      exclusiveMinimum: 0,
      maximum: 10,
      description: "Extension: divides positive (multiplies negative) logits of tokens in the prompt or generated so far.",
    },
  },
} as const;

type Table = typeof SAMPLING_SETTINGS;

/** The settings of SAMPLING_SETTINGS by their TypeScript names (each described by its schema); absent means "off". */
export type OptionalSamplingSettings = { -readonly [Wire in keyof Table as Table[Wire]["name"]]?: number };

/**
 * How tokens are chosen: one value carried unchanged from the HTTP schema through the engine
 * to the addon's sampler.
 */
export interface SamplingSettings extends OptionalSamplingSettings {
  /** <= 1e-5 samples greedily. */
  temperature: number;
  /** Sample among the k most likely tokens; null samples from the whole vocabulary. */
  topK: number | null;
}

const ENTRIES = Object.entries(SAMPLING_SETTINGS) as [keyof Table, Table[keyof Table]][];

/** The optional settings present in `source` (camelCase), nothing else. */
export function optionalSettings(source: OptionalSamplingSettings): OptionalSamplingSettings {
  const out: OptionalSamplingSettings = {};
  for (const [, { name }] of ENTRIES) {
    if (source[name] !== undefined) out[name] = source[name];
  }
  return out;
}

/** The optional settings a validated wire body gives (null means absent), by their TypeScript names. */
export function settingsFromWire(wire: Record<string, unknown>): OptionalSamplingSettings {
  const out: OptionalSamplingSettings = {};
  for (const [wireName, { name }] of ENTRIES) {
    const value = wire[wireName];
    if (value !== undefined && value !== null) out[name] = value as number;
  }
  return out;
}

/** Each setting's schema by wire name: the fragment the wire schemas embed. */
export function samplingSchemas(): { [Wire in keyof Table]: Table[Wire]["schema"] } {
  return Object.fromEntries(ENTRIES.map(([wireName, { schema }]) => [wireName, schema])) as {
    [Wire in keyof Table]: Table[Wire]["schema"];
  };
}
