/** Responses API objects from engine results: the response, its output items and usage. */
import { randomBytes } from "node:crypto";
import type { FinishReason } from "../../../types.js";
import { parseToolCalls, type ToolFormat } from "../tools/toolCalls.js";
import type { ConversationMessage, RequestEcho } from "./requests.js";

export type ResponseStatus = "in_progress" | "completed" | "incomplete";

export interface OutputText {
  type: "output_text";
  text: string;
  annotations: [];
  logprobs: [];
}

export interface MessageItem {
  id: string;
  type: "message";
  status: ResponseStatus;
  role: "assistant";
  content: OutputText[];
}

export interface FunctionCallItem {
  id: string;
  type: "function_call";
  status: ResponseStatus;
  call_id: string;
  name: string;
  arguments: string;
}

export type OutputItem = MessageItem | FunctionCallItem;

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** Ids in OpenAI's style: a type prefix and random hex. */
export const newItemId = (prefix: "resp" | "msg" | "fc" | "call"): string => `${prefix}_${randomBytes(24).toString("hex")}`;

export function usageOf(tokens: { promptTokens: number; completionTokens: number; cachedPromptTokens?: number | undefined }): ResponseUsage {
  return {
    input_tokens: tokens.promptTokens,
    input_tokens_details: { cached_tokens: tokens.cachedPromptTokens ?? 0 },
    output_tokens: tokens.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: tokens.promptTokens + tokens.completionTokens,
  };
}

export function outputText(text: string): OutputText {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

export function messageItem(id: string, text: string | undefined, status: ResponseStatus): MessageItem {
  return { id, type: "message", status, role: "assistant", content: text === undefined ? [] : [outputText(text)] };
}

/**
 * The output items of a choice's text: with tools (`toolFormat`), the calls it holds as
 * function_call items after the message of the text around them (none when there is none).
 */
export function outputItems(text: string, status: ResponseStatus, toolFormat: ToolFormat | undefined): OutputItem[] {
  if (!toolFormat) return [messageItem(newItemId("msg"), text, status)];
  const parsed = parseToolCalls(text, toolFormat);
  if (parsed.toolCalls.length === 0) return [messageItem(newItemId("msg"), text, status)];
  return [
    ...(parsed.content ? [messageItem(newItemId("msg"), parsed.content, "completed")] : []),
    ...parsed.toolCalls.map((call): FunctionCallItem => ({
      id: newItemId("fc"), type: "function_call", status, call_id: call.id, name: call.function.name, arguments: call.function.arguments,
    })),
  ];
}

/** A cut by the token limit is OpenAI's "incomplete" with reason max_output_tokens. */
export const statusOf = (finish: FinishReason | undefined): ResponseStatus => (finish === "length" ? "incomplete" : "completed");

export interface ResponseHead {
  id: string;
  createdAt: number;
  model: string;
  echo: RequestEcho;
}

/** The response object: what POST answers, GET returns and the stream's lifecycle events carry. */
export function responseObject(head: ResponseHead, status: ResponseStatus, output: readonly OutputItem[], usage: ResponseUsage | null) {
  return {
    id: head.id,
    object: "response",
    created_at: head.createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: head.echo.instructions,
    max_output_tokens: head.echo.max_output_tokens,
    max_tool_calls: null,
    metadata: head.echo.metadata,
    model: head.model,
    output,
    parallel_tool_calls: head.echo.parallel_tool_calls,
    previous_response_id: head.echo.previous_response_id,
    reasoning: { effort: null, summary: null },
    service_tier: "default",
    store: head.echo.store,
    temperature: head.echo.temperature,
    text: head.echo.text,
    tool_choice: head.echo.tool_choice,
    tools: head.echo.tools,
    top_logprobs: 0,
    top_p: head.echo.top_p,
    truncation: "disabled",
    usage,
    user: null,
  };
}

export type ResponseObject = ReturnType<typeof responseObject>;

/** The output as chat messages, for a continuation: the assistant's text and its calls, one message. */
export function outputMessages(output: readonly OutputItem[]): ConversationMessage[] {
  const text = output.flatMap((item) => (item.type === "message" ? item.content.map((part) => part.text) : [])).join("");
  const calls = output.flatMap((item) =>
    item.type === "function_call" ? [{ id: item.call_id, type: "function" as const, function: { name: item.name, arguments: item.arguments } }] : [],
  );
  return [{ role: "assistant", content: calls.length > 0 && text === "" ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) }];
}

/** What the store keeps per response: the object (for GET) and the conversation to continue. */
export interface StoredResponse {
  response: ResponseObject;
  conversation: ConversationMessage[];
}

/** And per output item, for an `item_reference` to it. */
export interface StoredItem {
  item: OutputItem;
}

export type Stored = StoredResponse | StoredItem;
