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
import type { ToolFormat } from "../tools/toolCalls.js";
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
  /** Present when the model may call tools: the format its output is parsed in (the chat route's). */
  toolFormat?: ToolFormat;
}

/** A function tool in the Responses API's flat form. */
interface ResponseTool {
  type: "function";
  name: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
  strict?: boolean | null;
}

type ResponseToolChoice = "none" | "auto" | "required" | { type: "function"; name: string };

export interface RequestEcho {
  tools: { type: "function"; name: string; description: string | null; parameters: Record<string, unknown> | null; strict: boolean }[];
  tool_choice: ResponseToolChoice;
  text: { format: object; verbosity: "medium" };
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
  text: [(v) => !([undefined, null, "medium"] as unknown[]).includes((v as { verbosity?: unknown }).verbosity), "only text.verbosity \"medium\""],
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

/** OpenAI's built-in tools (web search, file search, ...) run on OpenAI's side: there is nothing here to run them. */
function refuseHostedTools(body: Wire | null): void {
  if (typeof body !== "object" || body === null) return;
  const tools = body["tools"];
  if (Array.isArray(tools)) {
    tools.forEach((tool: unknown, index) => {
      const type = (tool as { type?: unknown } | null)?.type;
      if (typeof type === "string" && type !== "function") {
        throw badRequest(["tools", index, "type"], `\`${type}\` tools are not supported: only function tools`, "unsupported_parameter");
      }
    });
  }
  const choice = body["tool_choice"];
  const type = typeof choice === "object" && choice !== null ? (choice as { type?: unknown }).type : undefined;
  if (typeof type === "string" && type !== "function") {
    throw badRequest(["tool_choice"], `tool_choice of type \`${type}\` is not supported: "none", "auto", "required" or a function`, "unsupported_parameter");
  }
}

function present<T>(wire: Wire, name: string): T | undefined {
  const value = wire[name];
  return value === null || value === undefined ? undefined : (value as T);
}

/** The body checked: unknown fields first, then hosted tools, the schema, and what is not implemented. */
export function checkResponseRequest(body: unknown): Wire {
  if (typeof body === "object" && body !== null && !Array.isArray(body)) {
    for (const name of Object.keys(body)) {
      if (!KNOWN_FIELDS.has(name)) throw badRequest([name], `unknown parameter \`${name}\``, "unknown_parameter");
    }
  }
  refuseHostedTools(body as Wire);
  const wire = check<Wire>(validateRequest, body, "body");
  for (const [name, [used, why]] of Object.entries(UNSUPPORTED)) {
    const value = wire[name];
    if (value !== undefined && value !== null && used(value)) throw badRequest(name === "text" ? ["text", "verbosity"] : [name], why, "unsupported_parameter");
  }
  return wire;
}

/** A stored output item by its id (an `item_reference` input item), or undefined. */
export type ItemLookup = (id: string) => Wire | undefined;

/**
 * The checked body as the chat route's request; `history` is the stored conversation of
 * previous_response_id (the route looks it up), `lookup` finds item_reference's items.
 */
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
    parallel_tool_calls: wire["parallel_tool_calls"],
    ...chatTools(wire),
  };
  for (const name of ["seed", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "stop"]) chat[name] = wire[name];
  let parsed;
  try {
    parsed = parseChat(chat, template);
  } catch (err) {
    throw renamed(err);
  }
  const store = present<boolean>(wire, "store") ?? true;
  const tools = present<ResponseTool[]>(wire, "tools") ?? [];
  return {
    model: parsed.model,
    conversation,
    request: parsed.request,
    stream: parsed.stream,
    store,
    ...(parsed.tools ? { toolFormat: parsed.tools.format } : {}),
    echo: {
      tools: tools.map((tool) => ({ type: "function", name: tool.name, description: tool.description ?? null, parameters: tool.parameters ?? null, strict: tool.strict ?? true })),
      tool_choice: present<ResponseToolChoice>(wire, "tool_choice") ?? (tools.length > 0 ? "auto" : "none"),
      text: { format: present<{ format?: object | null }>(wire, "text")?.format ?? { type: "text" }, verbosity: "medium" },
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

/** tools, tool_choice and text.format in the chat route's form (its `tools` wrap each function; `response_format` wraps the schema). */
function chatTools(wire: Wire): Wire {
  const chat: Wire = {};
  const tools = present<ResponseTool[]>(wire, "tools");
  if (tools) {
    chat["tools"] = tools.map((tool) => ({
      type: "function",
      function: {
        name: tool.name,
        ...(typeof tool.description === "string" ? { description: tool.description } : {}),
        ...(tool.parameters ? { parameters: tool.parameters } : {}),
        ...(typeof tool.strict === "boolean" ? { strict: tool.strict } : {}),
      },
    }));
  }
  const choice = present<ResponseToolChoice>(wire, "tool_choice");
  // "auto" and "none" without tools mean what no tool_choice means (the chat route refuses a choice without tools).
  const offWithoutTools = (choice === "auto" || choice === "none") && !tools?.length;
  if (choice !== undefined && !offWithoutTools) chat["tool_choice"] = typeof choice === "string" ? choice : { type: "function", function: { name: choice.name } };
  const format = present<{ format?: { type: string; name?: string; description?: string; schema?: unknown; strict?: boolean | null } | null }>(wire, "text")?.format;
  if (format?.type === "json_object") chat["response_format"] = { type: "json_object" };
  if (format?.type === "json_schema") {
    const { name, description, schema, strict } = format;
    chat["response_format"] = {
      type: "json_schema",
      json_schema: { ...(name !== undefined ? { name } : {}), ...(description !== undefined ? { description } : {}), ...(schema !== undefined ? { schema } : {}), ...(strict !== undefined ? { strict } : {}) },
    };
  }
  return chat;
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
  tools: ["tools"],
  tool_choice: ["tool_choice"],
};

/** Chat's wrappers the Responses form does not have: tools.N.function.x -> tools.N.x, response_format.json_schema.x -> text.format.x. */
function unwrapped(field: string, rest: (string | number)[]): (string | number)[] {
  if (field === "messages") return []; // a message index no longer matches an input index: the input as a whole
  if (field === "tools" && rest[1] === "function") return [rest[0]!, ...rest.slice(2)];
  if (field === "tool_choice" && rest[0] === "function") return rest.slice(1);
  if (field === "response_format" && rest[0] === "json_schema") return rest.slice(1);
  return rest;
}

function renamed(err: unknown): unknown {
  if (!(err instanceof ServingError) || err.code !== "ERR_VALIDATION") return err;
  const issues = ((err.detail ?? []) as ValidationIssue[]).map((issue) => {
    const [where, field, ...rest] = issue.loc;
    const name = typeof field === "string" ? RESPONSES_NAMES[field] : undefined;
    return name ? { ...issue, loc: [where!, ...name, ...unwrapped(field as string, rest)] } : issue;
  });
  const message = err.message
    .replace(/\bmax_tokens\b/g, "max_output_tokens")
    .replace(/\bresponse_format(\.json_schema)?\b/g, "text.format")
    .replace(/\btools\.(\d+)\.function\b/g, "tools.$1")
    .replace(/\btool_choice\.function\b/g, "tool_choice");
  return new ServingError("ERR_VALIDATION", message, { detail: issues });
}

export function badRequest(loc: (string | number)[], message: string, type = "value_error"): ServingError {
  return new ServingError("ERR_VALIDATION", `${loc.join(".")}: ${message}`, { detail: [{ loc: ["body", ...loc], msg: message, type }] });
}
