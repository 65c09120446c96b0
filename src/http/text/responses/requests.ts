/**
 * A Responses request translated onto the chat-completions pipeline: `instructions`, the
 * stored conversation of `previous_response_id` and the `input` items become chat messages
 * (function_call items an assistant message's tool_calls, function_call_output items `tool`
 * messages), the other fields their chat names, and the chat route's own parser
 * (../openai/requests.ts parseChat) makes the engine request. So the Responses route renders,
 * samples and refuses exactly as /v1/chat/completions does; a 400 names the Responses field.
 */
import { ServingError } from "../../../errors.js";
import type { ChatTemplate, CompletionRequest } from "../../../types.js";
import { check, compile, type ValidationIssue } from "../../shell/validation.js";
import type { ChatMessage } from "../openai/chat.js";
import { parseChat } from "../openai/requests.js";
import { inputItemSchemas, responseRequestSchema } from "./schemas.js";

type Wire = Record<string, unknown>;

const validateRequest = compile(responseRequestSchema);
const validateItem = {
  message: compile(inputItemSchemas.message),
  function_call: compile(inputItemSchemas.function_call),
  function_call_output: compile(inputItemSchemas.function_call_output),
};

/** A chat message as the chat route takes it, tool calls included (templates that know them render them). */
export interface ConversationMessage extends ChatMessage {
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export interface ParsedResponseRequest {
  model: string;
  /** The conversation so far: the previous response's, then this input (instructions apart). */
  conversation: ConversationMessage[];
  request: CompletionRequest;
  stream: boolean;
  store: boolean;
  /** Request fields the response object repeats. */
  echo: RequestEcho;
}

export interface RequestEcho {
  instructions: string | null;
  max_output_tokens: number | null;
  temperature: number | null;
  top_p: number | null;
  previous_response_id: string | null;
  metadata: Record<string, string>;
  parallel_tool_calls: boolean;
  store: boolean;
}

/**
 * Fields of OpenAI's Responses API this server does not implement, with the test of a value
 * that asks for them (their "off" values pass): a 400 naming the field rather than output
 * that silently differs from what was asked.
 */
const UNSUPPORTED: Record<string, [used: (value: unknown) => boolean, why: string]> = {
  tools: [(v) => !Array.isArray(v) || v.length > 0, "tools are not supported yet"],
  tool_choice: [(v) => v !== "none" && v !== "auto", "tool_choice is not supported yet"],
  text: [(v) => !isTextFormat(v), "only text.format {type: \"text\"} is supported yet"],
  background: [(v) => v !== false, "background responses are not supported"],
  conversation: [() => true, "conversations are not supported; use previous_response_id"],
  prompt: [() => true, "prompt templates are not supported"],
  include: [(v) => !Array.isArray(v) || v.length > 0, "no additional output data is available"],
  reasoning: [(v) => typeof v !== "object" || Object.values(v as object).some((x) => x !== null && x !== undefined), "the served model does not reason"],
  truncation: [(v) => v !== "disabled", "only truncation \"disabled\" is supported"],
  top_logprobs: [(v) => v !== 0, "log-probabilities are not supported on this route (use /v1/chat/completions)"],
  max_tool_calls: [() => true, "max_tool_calls is not supported"],
  context_management: [() => true, "context management is not supported"],
  service_tier: [(v) => v !== "auto" && v !== "default", "only service_tier \"auto\" or \"default\""],
};

/** Accepted and ignored: hints with no effect on this server's output. */
const IGNORED = ["stream_options", "prompt_cache_key", "prompt_cache_retention", "safety_identifier"];

const KNOWN_FIELDS = new Set([...Object.keys(responseRequestSchema.properties), ...Object.keys(UNSUPPORTED), ...IGNORED]);

function isTextFormat(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const { format, verbosity, ...rest } = value as { format?: { type?: unknown } | null; verbosity?: unknown };
  return Object.keys(rest).length === 0 && (format === undefined || format === null || format.type === "text") && (verbosity ?? "medium") === "medium";
}

function present<T>(wire: Wire, name: string): T | undefined {
  const value = wire[name];
  return value === null || value === undefined ? undefined : (value as T);
}

/**
 * The body checked (unknown fields first, then the schema, then what is not implemented);
 * `history` is the stored conversation of previous_response_id (the route looks it up).
 */
export function checkResponseRequest(body: unknown): Wire {
  if (typeof body === "object" && body !== null && !Array.isArray(body)) {
    for (const name of Object.keys(body)) {
      if (!KNOWN_FIELDS.has(name)) throw badRequest([name], `unknown parameter \`${name}\``, "unknown_parameter");
    }
  }
  const wire = check<Wire>(validateRequest, body, "body");
  for (const [name, [used, why]] of Object.entries(UNSUPPORTED)) {
    const value = wire[name];
    if (value !== undefined && value !== null && used(value)) throw badRequest(name === "text" ? ["text", "format"] : [name], why, "unsupported_parameter");
  }
  return wire;
}

/** A stored output item by its id (an `item_reference` input item), or undefined. */
export type ItemLookup = (id: string) => Wire | undefined;

export function parseResponseRequest(
  wire: Wire,
  history: readonly ConversationMessage[],
  template: ChatTemplate | undefined,
  lookup: ItemLookup,
): ParsedResponseRequest {
  const instructions = present<string>(wire, "instructions") ?? null;
  const conversation = [...history, ...inputMessages(wire["input"] as string | Wire[], history, lookup)];
  const messages: ConversationMessage[] = instructions === null ? conversation : [{ role: "system", content: instructions }, ...conversation];
  const chat: Wire = {
    model: wire["model"],
    messages,
    max_tokens: wire["max_output_tokens"],
    temperature: wire["temperature"],
    top_k: wire["top_k"],
    stream: wire["stream"],
  };
  for (const name of ["seed", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "stop"]) chat[name] = wire[name];
  let parsed;
  try {
    parsed = parseChat(chat, template);
  } catch (err) {
    throw renamed(err);
  }
  const store = present<boolean>(wire, "store") ?? true;
  return {
    model: parsed.model,
    conversation,
    request: parsed.request,
    stream: parsed.stream,
    store,
    echo: {
      instructions,
      max_output_tokens: present<number>(wire, "max_output_tokens") ?? null,
      temperature: present<number>(wire, "temperature") ?? null,
      top_p: present<number>(wire, "top_p") ?? null,
      previous_response_id: present<string>(wire, "previous_response_id") ?? null,
      metadata: present<Record<string, string>>(wire, "metadata") ?? {},
      parallel_tool_calls: present<boolean>(wire, "parallel_tool_calls") ?? true,
      store,
    },
  };
}

/** The input items as chat messages; a function_call_output must answer a call made before it. */
function inputMessages(input: string | Wire[], history: readonly ConversationMessage[], lookup: ItemLookup): ConversationMessage[] {
  if (typeof input === "string") return [{ role: "user", content: input }];
  const messages: ConversationMessage[] = [];
  const calls = new Set(history.flatMap((message) => message.tool_calls?.map((call) => call.id) ?? []));
  input.forEach((given, index) => {
    let item = given;
    // A reference to an item of a stored response (what the AI SDK sends for an earlier assistant turn).
    if (item["type"] === "item_reference") {
      const id = item["id"];
      if (typeof id !== "string") throw badRequest(["input", index, "id"], "an item_reference needs the item's id");
      const stored = lookup(id);
      if (!stored) throw new ServingError("ERR_NOT_FOUND", `Item with id '${id}' not found.`, { detail: [{ loc: ["body", "input", index, "id"], msg: "not found", type: "not_found" }] });
      item = stored;
    }
    const type = typeof item["type"] === "string" ? (item["type"] as string) : "message";
    if (!(type in validateItem)) {
      throw badRequest(["input", index, "type"], `input items of type \`${type}\` are not supported (message, function_call, function_call_output, item_reference are)`, "unsupported_parameter");
    }
    const parts = type === "message" ? item["content"] : type === "function_call_output" ? item["output"] : undefined;
    if (Array.isArray(parts)) {
      parts.forEach((part: unknown, at) => {
        const kind = (part as { type?: unknown } | null)?.type;
        if (typeof kind === "string" && !TEXT_PARTS.has(kind)) {
          const field = type === "message" ? "content" : "output";
          throw badRequest(["input", index, field, at, "type"], `\`${kind}\` content is not supported: this server takes text only`, "unsupported_parameter");
        }
      });
    }
    const issues: ValidationIssue[] = [];
    try {
      check(validateItem[type as keyof typeof validateItem], item, "body");
    } catch (err) {
      const detail = ((err as ServingError).detail ?? []) as ValidationIssue[];
      for (const issue of detail) issues.push({ ...issue, loc: ["body", "input", index, ...issue.loc.slice(1)] });
      throw new ServingError("ERR_VALIDATION", issues.map((issue) => `${issue.loc.join(".")}: ${issue.msg}`).join("; "), { detail: issues });
    }
    if (type === "message") {
      messages.push({ role: item["role"] as string, content: textOf(item["content"] as string | { text: string }[]) });
    } else if (type === "function_call") {
      const call = { id: item["call_id"] as string, type: "function" as const, function: { name: item["name"] as string, arguments: item["arguments"] as string } };
      calls.add(call.id);
      const last = messages[messages.length - 1];
      // Calls of one turn (and the text before them) are one assistant message.
      if (last?.role === "assistant") (last.tool_calls ??= []).push(call);
      else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else {
      const callId = item["call_id"] as string;
      if (!calls.has(callId)) throw badRequest(["input", index, "call_id"], `no function_call with call_id \`${callId}\` precedes this output`, "invalid_value");
      messages.push({ role: "tool", tool_call_id: callId, content: textOf(item["output"] as string | { text: string }[]) });
    }
  });
  return messages;
}

const TEXT_PARTS = new Set(["input_text", "output_text", "text"]);

function textOf(content: string | { text: string }[]): string {
  return typeof content === "string" ? content : content.map((part) => part.text).join("");
}

/** Chat field names in the chat parser's errors, as the Responses request names them. */
const RESPONSES_NAMES: Record<string, (string | number)[]> = {
  max_tokens: ["max_output_tokens"],
  response_format: ["text", "format"],
  messages: ["input"],
};

function renamed(err: unknown): unknown {
  if (!(err instanceof ServingError) || err.code !== "ERR_VALIDATION") return err;
  const issues = ((err.detail ?? []) as ValidationIssue[]).map((issue) => {
    const [where, field, ...rest] = issue.loc;
    const name = typeof field === "string" ? RESPONSES_NAMES[field] : undefined;
    // A message index no longer matches an input index: name the input as a whole.
    return name ? { ...issue, loc: [where!, ...name, ...(field === "messages" ? [] : rest)] } : issue;
  });
  const message = err.message.replace(/\bmax_tokens\b/g, "max_output_tokens").replace(/\bresponse_format\b/g, "text.format");
  return new ServingError("ERR_VALIDATION", message, { detail: issues });
}

export function badRequest(loc: (string | number)[], message: string, type = "value_error"): ServingError {
  return new ServingError("ERR_VALIDATION", `${loc.join(".")}: ${message}`, { detail: [{ loc: ["body", ...loc], msg: message, type }] });
}
