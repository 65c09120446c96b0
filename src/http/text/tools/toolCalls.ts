/**
 * Tool calling over a chat template: which format the template's model writes tool calls in,
 * the constraint that enforces `tool_choice: "required"` or a named function, and the parsers
 * that turn the model's text into OpenAI `tool_calls` (whole, and as stream deltas).
 *
 * Formats, from the template text (what transformers' apply_chat_template renders with `tools`):
 * - "hermes" (Qwen2.5, Hermes, and the default for templates without tool support):
 *   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, repeated for parallel calls.
 * - "llama3" (Llama 3.1/3.2 JSON tool calling): `{"name": ..., "parameters": {...}}`, one call.
 * - "mistral": `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`.
 */
import { randomBytes } from "node:crypto";

import type { GenerationConstraint } from "../../../types.js";

export type ToolFormat = "hermes" | "llama3" | "mistral";

/** An OpenAI function tool (`{type: "function", function: {...}}`), unwrapped. */
export interface ToolFunction {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  strict?: boolean;
}

export type ToolChoice = "none" | "auto" | "required" | { name: string };

export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** The format a template writes tool calls in; null: the template has no tool support (the default applies). */
export function toolFormatOf(template: string | undefined): ToolFormat | null {
  if (!template || !/\btools\b/.test(template)) return null;
  if (template.includes("[TOOL_CALLS]")) return "mistral";
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes('"parameters"') || template.includes("parameters")) return "llama3";
  return "hermes";
}

/** The system text that describes the tools to a model whose template has no tool support. */
export function defaultToolPrompt(tools: readonly ToolFunction[]): string {
  const described = tools.map((tool) => JSON.stringify({ type: "function", function: tool })).join("\n");
  return (
    "You may call one or more functions to answer. The functions:\n" +
    `<tools>\n${described}\n</tools>\n` +
    "To call a function, answer with a JSON object with its name and arguments inside <tool_call></tool_call> tags:\n" +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

const argumentsKey = (format: ToolFormat) => (format === "llama3" ? "parameters" : "arguments");

/** JSON Schema of one call of `tools` in `format`: the name first, then its arguments. */
function callSchema(tools: readonly ToolFunction[], format: ToolFormat): Record<string, unknown> {
  const key = argumentsKey(format);
  const one = (tool: ToolFunction) => {
    const parameters = { ...(tool.parameters ?? { type: "object", properties: {} }) };
    delete parameters.$schema;
    return {
      type: "object",
      properties: { name: { const: tool.name }, [key]: parameters },
      required: ["name", key],
      additionalProperties: false,
    };
  };
  return tools.length === 1 ? one(tools[0]!) : { anyOf: tools.map(one) };
}

/**
 * The constraint of `tool_choice` "required" or a named function: the output is one call (or,
 * with parallel calls, one or more) whose arguments match the tool's parameters. Undefined for
 * "auto" and "none" (the model answers freely; a call it writes is parsed).
 */
export function toolConstraint(
  tools: readonly ToolFunction[],
  choice: ToolChoice,
  format: ToolFormat,
  parallel: boolean,
): GenerationConstraint | undefined {
  if (choice === "none" || choice === "auto") return undefined;
  const chosen = typeof choice === "object" ? tools.filter((tool) => tool.name === choice.name) : tools;
  const many = parallel && typeof choice !== "object";
  const schema = callSchema(chosen, format);
  switch (format) {
    case "hermes":
      return { type: "tagged_json", schema, begin: "<tool_call>\n", end: "\n</tool_call>", separator: "\n", repeat: many };
    case "llama3":
      return { type: "json_schema", schema, strict: true };
    case "mistral":
      // [TOOL_CALLS] is a special token, which constrained text never holds: the list alone.
      return { type: "json_schema", schema: { type: "array", items: schema, minItems: 1, ...(many ? {} : { maxItems: 1 }) }, strict: true };
  }
}

/** A tool call id; Mistral's template insists on 9 alphanumeric characters. */
export function newToolCallId(format: ToolFormat): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const length = format === "mistral" ? 9 : 24;
  const bytes = randomBytes(length);
  let id = "";
  for (const byte of bytes) id += alphabet[byte % alphabet.length];
  return format === "mistral" ? id : `call_${id}`;
}

export interface ParsedOutput {
  /** Text outside the calls; null when there is none. */
  content: string | null;
  toolCalls: ToolCall[];
}

interface RawCall {
  name: string;
  arguments: string;
}

/** A call object's name and arguments (as JSON text); undefined when it is not a call. */
function callOf(value: unknown, format: ToolFormat): RawCall | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const record = value as Record<string, unknown>;
  const args = record[argumentsKey(format)] ?? record.arguments ?? record.parameters;
  if (typeof record.name !== "string" || args === undefined) return undefined;
  return { name: record.name, arguments: typeof args === "string" ? args : JSON.stringify(args) };
}

function tryJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The model's whole output: its tool calls in `format`, and the text outside them. */
export function parseToolCalls(text: string, format: ToolFormat): ParsedOutput {
  const calls: RawCall[] = [];
  let content = text;
  if (format === "hermes") {
    const outside: string[] = [];
    let at = 0;
    const pattern = /<tool_call>([\s\S]*?)(?:<\/tool_call>|$)/g;
    for (let match = pattern.exec(text); match; match = pattern.exec(text)) {
      const call = callOf(tryJson(match[1]!.trim()), format);
      if (!call) continue;
      outside.push(text.slice(at, match.index));
      at = match.index + match[0].length;
      calls.push(call);
    }
    outside.push(text.slice(at));
    content = outside.join("");
  } else {
    const body = text.trim().replace(/^\[TOOL_CALLS\]\s*/, "").replace(/^<\|python_tag\|>\s*/, "");
    const parsed = tryJson(body);
    const list = Array.isArray(parsed) ? parsed : [parsed];
    const found = list.map((item) => callOf(item, format));
    if (list.length > 0 && found.every((call) => call !== undefined)) {
      calls.push(...(found as RawCall[]));
      content = "";
    }
  }
  const trimmed = content.trim();
  return {
    content: calls.length > 0 && trimmed === "" ? null : calls.length > 0 ? trimmed : text,
    toolCalls: calls.map((call) => ({ id: newToolCallId(format), type: "function", function: call })),
  };
}

/** A piece of a streamed choice: text, or a tool call's delta (OpenAI's `delta.tool_calls[i]`). */
export type StreamPiece =
  | { kind: "content"; text: string }
  | { kind: "tool_call"; index: number; id?: string; name?: string; arguments: string };

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/**
 * Tool calls of one streamed choice as OpenAI streams them: text before a call as content; a
 * call as its id and name first (as soon as the name is complete) and then its arguments in
 * pieces, as the model writes them. What could still turn out to be the start of a call is
 * held back until it is known. Llama 3 and Mistral outputs are a call only if the whole
 * output is one: their text is held until it can no longer be (or the end).
 */
export class ToolCallStreamParser {
  private buffer = "";
  private calls = 0;
  private sentContent = false;
  // The call being written (hermes): where its text starts in `buffer`, whether its name went
  // out, and how much of its arguments did.
  private inCall = false;
  private named = false;
  private argsStart = -1;
  private argsSent = 0;
  private callId = "";

  constructor(private readonly format: ToolFormat) {}

  /** Tool calls seen so far. */
  get toolCalls(): number {
    return this.calls;
  }

  push(text: string): StreamPiece[] {
    this.buffer += text;
    return this.format === "hermes" ? this.scanHermes(false) : this.scanWhole(false);
  }

  finish(): StreamPiece[] {
    return this.format === "hermes" ? this.scanHermes(true) : this.scanWhole(true);
  }

  private scanWhole(final: boolean): StreamPiece[] {
    const start = this.buffer.trimStart();
    const maybeCall = start === "" || start.startsWith("{") || start.startsWith("[") || "[TOOL_CALLS]".startsWith(start.slice(0, 12)) || start.startsWith("<|python_tag|>");
    if (!final && (maybeCall || this.calls > 0)) return [];
    if (!maybeCall || this.sentContent) {
      const text = this.buffer;
      this.buffer = "";
      this.sentContent = this.sentContent || text !== "";
      return text ? [{ kind: "content", text }] : [];
    }
    const parsed = parseToolCalls(this.buffer, this.format);
    this.buffer = "";
    if (parsed.toolCalls.length === 0) return parsed.content ? [{ kind: "content", text: parsed.content }] : [];
    const pieces: StreamPiece[] = [];
    for (const call of parsed.toolCalls) {
      const index = this.calls++;
      pieces.push({ kind: "tool_call", index, id: call.id, name: call.function.name, arguments: "" });
      pieces.push({ kind: "tool_call", index, arguments: call.function.arguments });
    }
    return pieces;
  }

  private scanHermes(final: boolean): StreamPiece[] {
    const pieces: StreamPiece[] = [];
    for (;;) {
      if (!this.inCall) {
        const open = this.buffer.indexOf(OPEN);
        if (open < 0) {
          // Hold back a tail that may be the start of "<tool_call>".
          const keep = final ? 0 : heldTail(this.buffer, OPEN);
          const text = this.buffer.slice(0, this.buffer.length - keep);
          if (text && (this.calls === 0 || text.trim() !== "")) pieces.push({ kind: "content", text });
          this.buffer = this.buffer.slice(this.buffer.length - keep);
          return pieces;
        }
        const before = this.buffer.slice(0, open);
        if (before && (this.calls === 0 || before.trim() !== "")) pieces.push({ kind: "content", text: before });
        this.buffer = this.buffer.slice(open + OPEN.length);
        this.inCall = true;
        this.named = false;
        this.argsStart = -1;
        this.argsSent = 0;
        this.callId = newToolCallId(this.format);
      }
      const close = this.buffer.indexOf(CLOSE);
      const body = close >= 0 ? this.buffer.slice(0, close) : this.buffer;
      const index = this.calls;
      if (!this.named) {
        const name = /^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*/.exec(body);
        if (name) {
          this.named = true;
          this.argsStart = name[0].length;
          pieces.push({ kind: "tool_call", index, id: this.callId, name: JSON.parse(`"${name[1]}"`) as string, arguments: "" });
        }
      }
      if (close < 0 && !final) {
        if (this.named) {
          // Arguments so far, up to the last "}" seen (the call's own closing brace comes last).
          const upTo = body.lastIndexOf("}");
          if (upTo > this.argsStart + this.argsSent) {
            pieces.push({ kind: "tool_call", index, arguments: body.slice(this.argsStart + this.argsSent, upTo) });
            this.argsSent = upTo - this.argsStart;
          }
        }
        return pieces;
      }
      // The call is complete (or the stream ended inside it).
      const call = callOf(tryJson(body.trim()), this.format);
      if (call) {
        if (!this.named) pieces.push({ kind: "tool_call", index, id: this.callId, name: call.name, arguments: "" });
        // The arguments as written (what the pieces already sent are a prefix of).
        const raw = this.named ? body.slice(this.argsStart, body.lastIndexOf("}")).trimEnd() : "";
        const rest = this.named && tryJson(raw) !== undefined ? raw.slice(this.argsSent) : this.named ? "" : call.arguments;
        if (rest) pieces.push({ kind: "tool_call", index, arguments: rest });
        this.calls += 1;
      } else if (!this.named) {
        pieces.push({ kind: "content", text: OPEN + body + (close >= 0 ? CLOSE : "") });
      } else {
        this.calls += 1; // a call cut short (max tokens): what was sent stands
      }
      this.inCall = false;
      this.buffer = close >= 0 ? this.buffer.slice(close + CLOSE.length) : "";
      if (final && this.buffer === "") return pieces;
    }
  }
}

/** Length of the longest tail of `text` that is a proper prefix of `marker`. */
function heldTail(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}
