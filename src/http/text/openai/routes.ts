/**
 * GET /v1/models, POST /v1/completions and POST /v1/chat/completions: wire adapters over the
 * app's one generation pipeline (../generation.ts), as /generate and /generate/stream are.
 * Whole responses go through the dynamic batcher (one engine call per batch; n choices are n
 * rows sharing one prefill); streams are not batched.
 */
import type { RequestHandler, Response } from "express";
import { ServingError } from "../../../errors.js";
import type { ChatTemplate, CompletionChunk, CompletionRequest } from "../../../types.js";
import { completeAll, streamCompletion, type Generation } from "../generation.js";
import { OPENAI_ERRORS, openAiError as openAiErrorBody } from "./errors.js";
import { jsonBody } from "../../shell/jsonBody.js";
import { RETRY_AFTER, json, ref, type RouteDescriptor } from "../../shell/routes.js";
import { MAX_BODY_BYTES } from "../../shell/schemas.js";
import { dataEvent } from "../sse.js";
import { chatCompletionRequestSchema, completionRequestSchema } from "./schemas.js";
import { parseChat, parseCompletion } from "./requests.js";
import { ToolCallStreamParser } from "../tools/toolCalls.js";
import {
  chatChoice,
  chatChunkChoice,
  chatLogprobs,
  chatPieceDelta,
  completionChoice,
  completionChunkChoice,
  newId,
  now,
  totalUsage,
  usageOf,
} from "./responses.js";

export interface OpenAiDeps {
  /** The app's generation pipeline, shared with /generate and /generate/stream. */
  readonly generation: Generation;
  readonly modelName: string;
  readonly chatTemplate: ChatTemplate | undefined;
  /** When the app was created: the model's `created`. */
  readonly createdAt: number;
}

const openAiError = (description: string) => ({ description, content: json(ref("OpenAiError")) });
const V1_ERRORS = {
  "400": openAiError("Invalid request (a schema violation or malformed JSON); `param` names the field."),
  "404": openAiError("The model named is not served here (code model_not_found)."),
  "413": openAiError(`Body larger than ${MAX_BODY_BYTES} bytes.`),
  "500": openAiError("Internal failure."),
  "503": { ...openAiError("Not serving, or the queue is full (code overloaded)."), headers: RETRY_AFTER },
};
const STREAMED =
  "With `stream: true`: server-sent events `data: {chunk}` and a final `data: [DONE]`; with " +
  "`stream_options.include_usage`, a last chunk with `usage` and no choices.";

/** GET /v1/models, POST /v1/completions, POST /v1/chat/completions. */
export function openAiRoutes(deps: OpenAiDeps): RouteDescriptor[] {
  return [
    {
      method: "get",
      path: "/v1/models",
      errors: OPENAI_ERRORS,
      doc: {
        summary: "The served model (OpenAI's list shape).",
        operationId: "listModels",
        responses: { "200": { description: "`{object: \"list\", data: [{id, object: \"model\", created, owned_by}]}`.", content: json({ type: "object" }) } },
      },
      handlers: [modelsHandler(deps)],
    },
    {
      method: "post",
      path: "/v1/completions",
      errors: OPENAI_ERRORS,
      schemas: { CompletionRequest: completionRequestSchema },
      doc: {
        summary: "OpenAI completions: n choices per prompt sharing one prefill, batched; or streamed.",
        operationId: "createCompletion",
        requestBody: {
          required: true,
          content: json(ref("CompletionRequest"), { model: deps.modelName, prompt: "Once upon a time", max_tokens: 4, seed: 1 }),
        },
        responses: {
          "200": { description: `A text_completion with choices and usage. ${STREAMED}`, content: { ...json({ type: "object" }), "text/event-stream": { schema: { type: "string" } } } },
          ...V1_ERRORS,
        },
      },
      handlers: [jsonBody(), completionsHandler(deps)],
    },
    {
      method: "post",
      path: "/v1/chat/completions",
      errors: OPENAI_ERRORS,
      schemas: { ChatCompletionRequest: chatCompletionRequestSchema },
      doc: {
        summary: "OpenAI chat completions: messages rendered with the checkpoint's chat template (or the default one).",
        operationId: "createChatCompletion",
        requestBody: {
          required: true,
          content: json(ref("ChatCompletionRequest"), {
            model: deps.modelName,
            messages: [{ role: "user", content: "Once upon a time" }],
            max_tokens: 4,
            seed: 1,
          }),
        },
        responses: {
          "200": { description: `A chat.completion with choices and usage. ${STREAMED} Chunks are chat.completion.chunk deltas, the role first.`, content: { ...json({ type: "object" }), "text/event-stream": { schema: { type: "string" } } } },
          ...V1_ERRORS,
        },
      },
      handlers: [jsonBody(), chatCompletionsHandler(deps)],
    },
  ];
}

function modelsHandler(deps: OpenAiDeps): RequestHandler {
  return (_req, res) => {
    res.json({
      object: "list",
      data: [{ id: deps.modelName, object: "model", created: deps.createdAt, owned_by: "torchserve-node" }],
    });
  };
}

function completionsHandler(deps: OpenAiDeps): RequestHandler {
  return async (req, res) => {
    const parsed = parseCompletion(req.body);
    checkModel(deps, parsed.model);
    checkTokenIds(deps, parsed.requests);
    const id = newId("cmpl");
    const created = now();
    const head = { id, object: "text_completion", created, model: deps.modelName };
    if (parsed.stream) {
      const request = parsed.requests[0]!;
      const echo = parsed.echo ? request.prompt : "";
      await streamChunks(deps, res, request, parsed.includeUsage, {
        opening: () => (echo ? [{ ...head, choices: openingEcho(request.n ?? 1, echo) }] : []),
        chunk: (chunk) => ({ ...head, choices: [completionChunkChoice(chunk)] }),
        usage: (usage) => ({ ...head, choices: [], usage }),
      });
      return;
    }
    const completions = await completeAll(deps.generation, res, parsed.requests);
    if (!completions) return;
    let index = 0;
    const choices = completions.flatMap((completion, p) =>
      completion.choices.map((choice) => completionChoice(choice, index++, parsed.echo ? parsed.requests[p]!.prompt : "")),
    );
    res.json({ ...head, choices, ...(deps.generation.engine.countsTokens ? { usage: totalUsage(completions) } : {}) });
  };
}

function chatCompletionsHandler(deps: OpenAiDeps): RequestHandler {
  return async (req, res) => {
    const parsed = parseChat(req.body, deps.chatTemplate);
    checkModel(deps, parsed.model);
    const id = newId("chatcmpl");
    const created = now();
    if (parsed.stream) {
      const head = { id, object: "chat.completion.chunk", created, model: deps.modelName, system_fingerprint: null };
      const n = parsed.request.n ?? 1;
      const toolFormat = parsed.tools?.format;
      const parsers = toolFormat ? Array.from({ length: n }, () => new ToolCallStreamParser(toolFormat)) : undefined;
      await streamChunks(deps, res, parsed.request, parsed.includeUsage, {
        // The role comes first, then content deltas (OpenAI's order).
        opening: () =>
          Array.from({ length: n }, (_unused, index) => ({
            ...head,
            choices: [{ index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
          })),
        chunk: (chunk) => (parsers ? toolChunks(chunk) : { ...head, choices: [chatChunkChoice(chunk)] }),
        usage: (usage) => ({ ...head, choices: [], usage }),
      });
      return;

      // With tools: each choice's text through its parser; deltas of content and tool calls,
      // and finish_reason "tool_calls" on a choice that called one.
      function toolChunks(chunk: CompletionChunk): object[] {
        const parser = parsers![chunk.index]!;
        const pieces = [...parser.push(chunk.text), ...(chunk.finishReason ? parser.finish() : [])];
        const events: object[] = pieces.map((piece, i) => ({
          ...head,
          choices: [{ index: chunk.index, delta: chatPieceDelta(piece), logprobs: i === 0 ? chatLogprobs(chunk.logprobs) : null, finish_reason: null }],
        }));
        if (chunk.finishReason) {
          const reason = parser.toolCalls > 0 && chunk.finishReason === "stop" ? "tool_calls" : chunk.finishReason;
          events.push({ ...head, choices: [{ index: chunk.index, delta: {}, logprobs: null, finish_reason: reason }] });
        } else if (events.length === 0 && chunk.logprobs?.length) {
          events.push({ ...head, choices: [{ index: chunk.index, delta: {}, logprobs: chatLogprobs(chunk.logprobs), finish_reason: null }] });
        }
        return events;
      }
    }
    const completions = await completeAll(deps.generation, res, [parsed.request]);
    if (!completions) return;
    const completion = completions[0]!;
    res.json({
      id,
      object: "chat.completion",
      created,
      model: deps.modelName,
      system_fingerprint: null,
      choices: completion.choices.map((choice, index) => chatChoice(choice, index, parsed.tools?.format)),
      ...(deps.generation.engine.countsTokens ? { usage: totalUsage(completions) } : {}),
    });
  };
}

export function checkModel(deps: OpenAiDeps, model: string): void {
  if (model !== deps.modelName) {
    throw new ServingError("ERR_MODEL_NOT_FOUND", `The model \`${model}\` does not exist; this server serves \`${deps.modelName}\``);
  }
}

/** A token id outside the vocabulary is this request's 400, never a failed batch for its neighbours. */
function checkTokenIds(deps: OpenAiDeps, requests: readonly CompletionRequest[]): void {
  if (!requests.some((request) => request.promptTokens)) return;
  const size = deps.generation.engine.vocabularySize;
  const problem =
    size === undefined
      ? "this engine takes text prompts only"
      : requests.some((request) => request.promptTokens?.some((id) => id >= size))
        ? `token ids must be below the vocabulary size (${size})`
        : undefined;
  if (problem !== undefined) {
    throw new ServingError("ERR_VALIDATION", `prompt: ${problem}`, {
      detail: [{ loc: ["body", "prompt"], msg: problem, type: "value_error" }],
    });
  }
}

function openingEcho(n: number, prompt: string) {
  return Array.from({ length: n }, (_unused, index) => ({ index, text: prompt, logprobs: null, finish_reason: null }));
}

interface ChunkFormat {
  /** Events sent when the stream opens (chat: each choice's role). */
  opening(): object[];
  /** One chunk, or several (tool-call deltas), or none. */
  chunk(chunk: CompletionChunk): object | object[];
  usage(usage: ReturnType<typeof usageOf>): object;
}

/**
 * A /v1 stream: `data: {chunk}` events, with include_usage a last chunk with `usage` and no
 * choices, then [DONE]; a failure after the first chunk is a `data: {"error": ...}` event (what
 * the OpenAI clients raise as an APIError), then the stream ends.
 */
async function streamChunks(
  deps: OpenAiDeps,
  res: Response,
  request: CompletionRequest,
  includeUsage: boolean,
  format: ChunkFormat,
): Promise<void> {
  const countsTokens = deps.generation.engine.countsTokens;
  await streamCompletion(deps.generation, res, request, {
    opening: () => format.opening().map(dataEvent),
    chunk: (chunk) => {
      if (!(chunk.text || chunk.finishReason || chunk.logprobs?.length)) return undefined;
      const out = format.chunk(chunk);
      if (!Array.isArray(out)) return dataEvent(out);
      return out.length > 0 ? out.map(dataEvent).join("") : undefined;
    },
    closing: ({ promptTokens, completionTokens, cachedPromptTokens }) =>
      includeUsage && countsTokens
        ? [dataEvent(format.usage(usageOf(promptTokens, completionTokens, cachedPromptTokens)))]
        : [],
    failure: (err) => dataEvent(openAiErrorBody(err).body),
  });
}
