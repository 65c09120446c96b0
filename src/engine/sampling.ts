/**
 * The optional sampling settings by wire name: the one table that says which fields of a
 * request are SamplingSettings beyond temperature and top_k. Validation turns wire bodies
 * into settings with it (src/http/validation.ts), and the engine copies the same fields to
 * the addon with it, so a new setting is one line here, one schema property
 * (samplingProperties), one interface field, and its C++ and Python.
 */
import type { SamplingSettings } from "../types.js";

export const SAMPLING_WIRE_NAMES = {
  seed: "seed",
  top_p: "topP",
  min_p: "minP",
  presence_penalty: "presencePenalty",
  frequency_penalty: "frequencyPenalty",
  repetition_penalty: "repetitionPenalty",
} as const satisfies Record<string, keyof SamplingSettings>;

/** The optional settings present in `source` (camelCase), nothing else. */
export function optionalSettings(source: Partial<SamplingSettings>): Partial<SamplingSettings> {
  const out: Partial<Record<keyof SamplingSettings, unknown>> = {};
  for (const name of Object.values(SAMPLING_WIRE_NAMES)) {
    if (source[name] !== undefined) out[name] = source[name];
  }
  return out as Partial<SamplingSettings>;
}
