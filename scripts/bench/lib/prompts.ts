/**
 * The fixed prompt set every generation benchmark sends, in this order, round-robin: plain
 * English of assorted lengths (2 to 183 bytes), so batches mix prefill lengths the way real
 * traffic does. Generation is greedy (temperature at or below 1e-5 is greedy in both the
 * addon and reference.py), so every server produces the same tokens for the same prompt.
 */
export const PROMPTS: readonly string[] = [
  "The jury said it",
  "In the morning the committee met to consider",
  "She looked out of the window at the rain and thought about",
  "The president told reporters that",
  "Mr. Johnson, who has served on the board of education since 1958, said the new school",
  "It was a long time before anyone spoke.",
  "The results of the survey show that most families in the area",
  "He",
  "According to the report, the city's water supply",
  "The first thing to understand about the theory is that it does not",
  "When the game ended, the crowd",
  "Our purpose in this chapter is to describe the methods by which the data were collected and to explain why the sample was chosen as it was, since the conclusions that follow depend on",
  "The old man walked slowly down the road toward the church, where",
  "In 1961 the state legislature passed a bill that",
  "They had not expected the letter to arrive so soon, and when it did",
  "The engine of the car",
];

/** Temperatures at or below 1e-5 mean greedy (native/runtime/Sampler.h, python/torchserve_node/reference.py). */
export const GREEDY_TEMPERATURE = 1e-6;

export interface WireRequest {
  prompt: string;
  max_new_tokens: number;
  temperature: number;
  top_k: null;
}

export function wireRequest(n: number, maxNewTokens: number): WireRequest {
  return { prompt: PROMPTS[n % PROMPTS.length]!, max_new_tokens: maxNewTokens, temperature: GREEDY_TEMPERATURE, top_k: null };
}

/** A good /generate answer: a text and a latency. */
export function isGenerateAnswer(body: string): boolean {
  try {
    const parsed = JSON.parse(body) as { text?: unknown; latency_ms?: unknown };
    return typeof parsed.text === "string" && typeof parsed.latency_ms === "number";
  } catch {
    return false;
  }
}
