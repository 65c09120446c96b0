/**
 * Validated /v1 bodies turned into engine requests: one CompletionRequest per prompt, with
 * the shared sampling settings (validation.ts samplingFromWire) and n.
 */
import { ServingError } from "../../../errors.js";
import type { ChatTemplate, CompletionRequest } from "../../../types.js";
import { check, compile } from "../../shell/validation.js";
import { samplingFromWire } from "../validation.js";
import { constraintField } from "../structuredOutputs.js";
import { defaultToolPrompt, toolConstraint, toolFormatOf, type ToolChoice, type ToolFormat, type ToolFunction } from "../tools/toolCalls.js";
import { renderChat, type ChatMessage } from "./chat.js";
import { DEFAULT_MAX_TOKENS, MAX_CHOICES, chatCompletionRequestSchema, completionRequestSchema } from "./schemas.js";

const validateCompletion = compile(completionRequestSchema);
const validateChat = compile(chatCompletionRequestSchema);

type Wire = Record<string, unknown>;

export interface ParsedCompletion {
  model: string;
  requests: CompletionRequest[];
  stream: boolean;
  includeUsage: boolean;
  echo: boolean;
  /** Top alternatives per token; undefined: no log-probabilities. */
  logprobs: number | undefined;
}

export interface ParsedChat {
  model: string;
  request: CompletionRequest;
  stream: boolean;
  includeUsage: boolean;
  logprobs: boolean;
  /** Present when the model may call tools: the format its output is parsed in. */
  tools?: { format: ToolFormat };
}

function present<T>(wire: Wire, name: string): T | undefined {
  const value = wire[name];
  return value === null || value === undefined ? undefined : (value as T);
}

/** What completions and chat share: max tokens, temperature, top_k, n, the sampling fragment. */
function base(wire: Wire, maxTokens: number): Omit<CompletionRequest, "prompt"> {
  return {
    maxNewTokens: maxTokens,
    temperature: present<number>(wire, "temperature") ?? 1,
    topK: present<number>(wire, "top_k") || null,
    n: present<number>(wire, "n") ?? 1,
    ...samplingFromWire(wire),
  };
}

/**
 * OpenAI fields this server does not implement: a 400 naming the field rather than output
 * that silently differs from what was asked (their "off" values pass).
 */
const UNSUPPORTED: Record<string, (value: unknown) => boolean> = {
  functions: (v) => Array.isArray(v) && v.length > 0,
  function_call: (v) => v !== "none",
  logit_bias: (v) => typeof v === "object" && Object.keys(v as object).length > 0,
  suffix: (v) => v !== "",
  best_of: (v) => v !== 1,
  audio: () => true,
  prediction: () => true,
};

function refuseUnsupported(wire: Wire): void {
  for (const [name, used] of Object.entries(UNSUPPORTED)) {
    const value = wire[name];
    if (value !== undefined && value !== null && used(value)) throw badRequest(name, "is not supported by this server");
  }
}

export function parseCompletion(body: unknown): ParsedCompletion {
  const wire = check<Wire>(validateCompletion, body, "body");
  refuseUnsupported(wire);
  const prompt = wire["prompt"] as string | string[] | number[] | number[][];
  const settings = { ...base(wire, present<number>(wire, "max_tokens") ?? DEFAULT_MAX_TOKENS.completions), ...constraintField(wire) };
  const logprobs = present<number>(wire, "logprobs");
  if (logprobs !== undefined) settings.logprobs = logprobs;
  let prompts: (string | number[])[];
  if (typeof prompt === "string") prompts = [prompt];
  else if (typeof prompt[0] === "number") prompts = [prompt as number[]];
  else prompts = prompt as string[] | number[][];
  const stream = present<boolean>(wire, "stream") ?? false;
  const echo = present<boolean>(wire, "echo") ?? false;
  if (prompts.length * (settings.n ?? 1) > MAX_CHOICES) {
    throw badRequest("n", `at most ${MAX_CHOICES} choices per request (prompts x n)`);
  }
  if (stream && prompts.length > 1) throw badRequest("prompt", "a streamed request takes one prompt");
  if (echo && logprobs !== undefined) throw badRequest("echo", "echo with logprobs (the prompt's log-probabilities) is not supported");
  return {
    model: wire["model"] as string,
    requests: prompts.map((one) =>
      typeof one === "string" ? { ...settings, prompt: one } : { ...settings, prompt: "", promptTokens: one },
    ),
    stream,
    includeUsage: (wire["stream_options"] as { include_usage?: boolean } | null | undefined)?.include_usage === true,
    echo,
    logprobs,
  };
}

export function parseChat(body: unknown, template: ChatTemplate | undefined): ParsedChat {
  const wire = check<Wire>(validateChat, body, "body");
  refuseUnsupported(wire);
  const maxTokens =
    present<number>(wire, "max_completion_tokens") ?? present<number>(wire, "max_tokens") ?? DEFAULT_MAX_TOKENS.chat;
  const hasTools = (present<unknown[]>(wire, "tools") ?? []).length > 0;
  const settings: Omit<CompletionRequest, "prompt"> = { ...base(wire, maxTokens), ...constraintField(wire, { tools: hasTools }) };
  const logprobs = present<boolean>(wire, "logprobs") ?? false;
  const top = present<number>(wire, "top_logprobs");
  if (top !== undefined && !logprobs) throw badRequest("top_logprobs", "top_logprobs needs logprobs: true");
  if (logprobs) settings.logprobs = top ?? 0;
  const messages = wire["messages"] as ChatMessage[];
  const toolList = (present<{ function: ToolFunction }[]>(wire, "tools") ?? []).map((tool) => tool.function);
  const choiceWire = present<string | { function: { name: string } }>(wire, "tool_choice");
  const choice: ToolChoice =
    typeof choiceWire === "object" ? { name: choiceWire.function.name } : ((choiceWire as ToolChoice | undefined) ?? (toolList.length > 0 ? "auto" : "none"));
  if (choice !== "none" && toolList.length === 0) throw badRequest("tool_choice", "needs tools");
  if (typeof choice === "object" && !toolList.some((tool) => tool.name === choice.name)) {
    throw badRequest("tool_choice", `names a function that is not among the tools: ${choice.name}`);
  }
  const callsTools = toolList.length > 0 && choice !== "none";
  const native = toolFormatOf(template?.template);
  const format: ToolFormat = native ?? "hermes";
  let prompt: string;
  if (toolList.length > 0 && native === null) {
    // The template knows no tools: describe them in a system message (the default tool format).
    const description = defaultToolPrompt(toolList);
    const [first, ...rest] = messages;
    const withTools: ChatMessage[] =
      first && (first.role === "system" || first.role === "developer")
        ? [{ ...first, content: `${textOf(first.content)}\n\n${description}` }, ...rest]
        : [{ role: "system", content: description }, ...messages];
    prompt = renderChat(callsTools ? withTools : messages, template, { inlineTools: true });
  } else {
    prompt = renderChat(messages, template, toolList.length > 0 ? { tools: toolList.map((fn) => ({ type: "function" as const, function: fn })) } : {});
  }
  const request: CompletionRequest = { ...settings, prompt, templated: true };
  const parallel = present<boolean>(wire, "parallel_tool_calls") ?? true;
  const constraint = callsTools ? toolConstraint(toolList, choice, format, parallel) : undefined;
  if (constraint) request.constraint = constraint;
  return {
    model: wire["model"] as string,
    request,
    stream: present<boolean>(wire, "stream") ?? false,
    includeUsage: (wire["stream_options"] as { include_usage?: boolean } | null | undefined)?.include_usage === true,
    logprobs,
    ...(callsTools ? { tools: { format } } : {}),
  };
}

function textOf(content: ChatMessage["content"]): string {
  return Array.isArray(content) ? content.map((part) => part.text ?? "").join("") : (content ?? "");
}

function badRequest(param: string, message: string): ServingError {
  return new ServingError("ERR_VALIDATION", `${param}: ${message}`, {
    detail: [{ loc: ["body", param], msg: message, type: "value_error" }],
  });
}
