/** The spec's generate body validated into the engine's request (camelCase), and the sampling fields every text route shares. */
import type { CompletionRequest } from "../../types.js";
import { settingsFromWire, type OptionalSamplingSettings } from "../../engine/sampling.js";
import { check, compile } from "../shell/validation.js";
import { generateRequestSchema } from "./schemas.js";
import { constraintField } from "./structuredOutputs.js";

const validateGenerate = compile(generateRequestSchema);

/** The sampling part of a validated wire body: the optional settings present, and `stop` as a list. */
export function samplingFromWire(wire: Record<string, unknown>): OptionalSamplingSettings & { stop?: string[] } {
  const settings: OptionalSamplingSettings & { stop?: string[] } = settingsFromWire(wire);
  const stop = wire["stop"];
  if (typeof stop === "string") settings.stop = [stop];
  else if (Array.isArray(stop) && stop.length > 0) settings.stop = stop as string[];
  return settings;
}

/** Validates a parsed JSON body (defaults filled in) and returns the engine's request. */
export function parseGenerateRequest(body: unknown): CompletionRequest {
  const wire = check<Record<string, unknown> & { prompt: string; max_new_tokens: number; temperature: number; top_k: number | null }>(
    validateGenerate,
    body,
    "body",
  );
  return {
    prompt: wire.prompt,
    maxNewTokens: wire.max_new_tokens,
    temperature: wire.temperature,
    topK: wire.top_k,
    ...samplingFromWire(wire),
    ...constraintField(wire),
  };
}
