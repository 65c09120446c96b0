/** OpenAI response bodies from engine results: completions and chat, whole and as stream chunks. */
import { randomUUID } from "node:crypto";
import type { Completion, CompletionChoice, CompletionChunk, TokenLogprob } from "../../../types.js";
import { parseToolCalls, type StreamPiece, type ToolFormat } from "../tools/toolCalls.js";

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Present when the engine reports prefix-cache reuse: prompt tokens it did not prefill again. */
  prompt_tokens_details?: { cached_tokens: number };
}

export function usageOf(promptTokens: number, completionTokens: number, cachedTokens?: number): Usage {
  const usage: Usage = { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
  if (cachedTokens !== undefined) usage.prompt_tokens_details = { cached_tokens: cachedTokens };
  return usage;
}

export function totalUsage(completions: readonly Completion[]): Usage {
  let prompt = 0;
  let completion = 0;
  let cached: number | undefined;
  for (const c of completions) {
    prompt += c.promptTokens;
    if (c.cachedPromptTokens !== undefined) cached = (cached ?? 0) + c.cachedPromptTokens;
    for (const choice of c.choices) completion += choice.completionTokens;
  }
  return usageOf(prompt, completion, cached);
}

export const newId = (prefix: "cmpl" | "chatcmpl"): string => `${prefix}-${randomUUID().replace(/-/g, "")}`;
export const now = (): number => Math.floor(Date.now() / 1000);

/** Completions' legacy logprobs object; text_offset counts from the start of the choice's text. */
export function completionLogprobs(tokens: readonly TokenLogprob[] | undefined, offset = 0) {
  if (!tokens) return null;
  const textOffset: number[] = [];
  let at = offset;
  for (const t of tokens) {
    textOffset.push(at);
    at += t.token.length;
  }
  return {
    tokens: tokens.map((t) => t.token),
    token_logprobs: tokens.map((t) => t.logprob),
    top_logprobs: tokens.map((t) => Object.fromEntries(t.top.map((alt) => [alt.token, alt.logprob]))),
    text_offset: textOffset,
  };
}

/** Chat's logprobs object. */
export function chatLogprobs(tokens: readonly TokenLogprob[] | undefined) {
  if (!tokens) return null;
  return {
    content: tokens.map((t) => ({
      token: t.token,
      logprob: t.logprob,
      bytes: t.bytes,
      top_logprobs: t.top.map((alt) => ({ token: alt.token, logprob: alt.logprob, bytes: alt.bytes })),
    })),
  };
}

export function completionChoice(choice: CompletionChoice, index: number, prefix: string) {
  return {
    index,
    text: prefix + choice.text,
    logprobs: completionLogprobs(choice.logprobs),
    finish_reason: choice.finishReason,
  };
}

/** A chat choice; with `toolFormat`, the tool calls the text holds become `tool_calls` (finish_reason "tool_calls"). */
export function chatChoice(choice: CompletionChoice, index: number, toolFormat?: ToolFormat) {
  if (toolFormat) {
    const parsed = parseToolCalls(choice.text, toolFormat);
    if (parsed.toolCalls.length > 0) {
      return {
        index,
        message: { role: "assistant", content: parsed.content, refusal: null, tool_calls: parsed.toolCalls },
        logprobs: chatLogprobs(choice.logprobs),
        finish_reason: choice.finishReason === "stop" ? "tool_calls" : choice.finishReason,
      };
    }
  }
  return {
    index,
    message: { role: "assistant", content: choice.text, refusal: null },
    logprobs: chatLogprobs(choice.logprobs),
    finish_reason: choice.finishReason,
  };
}

/** Stream deltas of parsed pieces: content, or tool-call deltas (id, type and name first, then arguments). */
export function chatPieceDelta(piece: StreamPiece) {
  if (piece.kind === "content") return { content: piece.text };
  const call: Record<string, unknown> = { index: piece.index };
  if (piece.id !== undefined) {
    call.id = piece.id;
    call.type = "function";
    call.function = { name: piece.name, arguments: piece.arguments };
  } else {
    call.function = { arguments: piece.arguments };
  }
  return { tool_calls: [call] };
}

/** One streamed chunk's choice, per route. */
export function completionChunkChoice(chunk: CompletionChunk) {
  return {
    index: chunk.index,
    text: chunk.text,
    logprobs: completionLogprobs(chunk.logprobs),
    finish_reason: chunk.finishReason ?? null,
  };
}

export function chatChunkChoice(chunk: CompletionChunk) {
  const delta: { content?: string } = chunk.text || !chunk.finishReason ? { content: chunk.text } : {};
  return {
    index: chunk.index,
    delta,
    logprobs: chatLogprobs(chunk.logprobs),
    finish_reason: chunk.finishReason ?? null,
  };
}
