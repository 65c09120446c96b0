/**
 * POST /v1/responses and GET /v1/responses/{id}: OpenAI's Responses API as a wire adapter
 * over the chat-completions pipeline (requests.ts translates the request; the app's batcher
 * and stream loop in ../generation.ts run it). Whole responses are batched, streams are not;
 * both keep the response in the bounded store (store.ts) unless `store: false`.
 */
import type { RequestHandler, Response } from "express";
import { ServingError } from "../../../errors.js";
import type { CompletionChunk, FinishReason } from "../../../types.js";
import { jsonBody } from "../../shell/jsonBody.js";
import { RETRY_AFTER, json, ref, type RouteDescriptor } from "../../shell/routes.js";
import { MAX_BODY_BYTES } from "../../shell/schemas.js";
import { completeAll, streamCompletion } from "../generation.js";
import { OPENAI_ERRORS, openAiError } from "../openai/errors.js";
import { checkModel, type OpenAiDeps } from "../openai/routes.js";
import { ToolCallStreamParser, type StreamPiece } from "../tools/toolCalls.js";
import { OutputEvents } from "./events.js";
import {
  newItemId,
  outputItems,
  outputMessages,
  responseObject,
  statusOf,
  usageOf,
  type OutputItem,
  type ResponseHead,
  type Stored,
  type StoredResponse,
} from "./objects.js";
import { checkResponseRequest, parseResponseRequest, type ConversationMessage, type ParsedResponseRequest } from "./requests.js";
import { responseRequestSchema } from "./schemas.js";
import type { ResponseStore } from "./store.js";

export interface ResponsesDeps extends OpenAiDeps {
  /** Responses by id, and their output items by id. */
  readonly store: ResponseStore<Stored>;
}

const openAiErrorDoc = (description: string) => ({ description, content: json(ref("OpenAiError")) });

export function responsesRoutes(deps: ResponsesDeps): RouteDescriptor[] {
  return [
    {
      method: "post",
      path: "/v1/responses",
      errors: OPENAI_ERRORS,
      schemas: { ResponseRequest: responseRequestSchema },
      doc: {
        summary: "OpenAI Responses: input items rendered with the chat template, continued from a stored response by previous_response_id.",
        operationId: "createResponse",
        requestBody: {
          required: true,
          content: json(ref("ResponseRequest"), { model: deps.modelName, input: "Once upon a time", max_output_tokens: 4, seed: 1 }),
        },
        responses: {
          "200": {
            description:
              "A response object with output items and usage. With `stream: true`: server-sent events `event: <type>` " +
              "`data: {type, sequence_number, ...}` from response.created to response.completed (response.incomplete " +
              "when cut by max_output_tokens), or an `error` event when generation fails after the stream opened.",
            content: { ...json({ type: "object" }), "text/event-stream": { schema: { type: "string" } } },
          },
          "400": openAiErrorDoc("Invalid request, an unknown field or one not implemented; `param` names the field."),
          "404": openAiErrorDoc("The model is not served here, or previous_response_id is unknown, expired or was not stored."),
          "413": openAiErrorDoc(`Body larger than ${MAX_BODY_BYTES} bytes.`),
          "500": openAiErrorDoc("Internal failure."),
          "503": { ...openAiErrorDoc("Not serving, the queue is full, or too many streams (code overloaded)."), headers: RETRY_AFTER },
        },
      },
      handlers: [jsonBody(), createHandler(deps)],
    },
    {
      method: "get",
      path: "/v1/responses/:id",
      errors: OPENAI_ERRORS,
      doc: {
        summary: "A stored response (kept in this process's memory, bounded in size and age).",
        operationId: "getResponse",
        parameters: [{ name: "id", in: "path", required: true, schema: { type: "string" } }],
        responses: {
          "200": { description: "The response object as POST answered it.", content: json({ type: "object" }) },
          "404": openAiErrorDoc("Unknown, expired, evicted, or created with store: false."),
        },
      },
      handlers: [retrieveHandler(deps)],
    },
  ];
}

function notFound(id: string, param: string | null): ServingError {
  return new ServingError("ERR_NOT_FOUND", `Response with id '${id}' not found.`, {
    detail: param === null ? [] : [{ loc: ["body", param], msg: "not found", type: "not_found" }],
  });
}

function retrieveHandler(deps: ResponsesDeps): RequestHandler {
  return (req, res) => {
    const id = String(req.params["id"]);
    const stored = deps.store.get(id);
    if (!stored || !("response" in stored)) throw notFound(id, null);
    res.json(stored.response);
  };
}

function createHandler(deps: ResponsesDeps): RequestHandler {
  return async (req, res) => {
    const wire = checkResponseRequest(req.body);
    const previousId = wire["previous_response_id"];
    let history: ConversationMessage[] = [];
    if (typeof previousId === "string") {
      const previous = deps.store.get(previousId);
      if (!previous || !("response" in previous)) throw notFound(previousId, "previous_response_id");
      history = previous.conversation;
    }
    const parsed = parseResponseRequest(wire, history, deps.chatTemplate, (id) => {
      const stored = deps.store.get(id);
      return stored && "item" in stored ? (stored.item as unknown as Record<string, unknown>) : undefined;
    });
    checkModel(deps, parsed.model);
    const head: ResponseHead = { id: newItemId("resp"), createdAt: Math.floor(Date.now() / 1000), model: deps.modelName, echo: parsed.echo };
    if (parsed.stream) {
      await streamResponse(deps, res, parsed, head);
      return;
    }
    const completions = await completeAll(deps.generation, res, [parsed.request]);
    if (!completions) return;
    const completion = completions[0]!;
    const choice = completion.choices[0]!;
    const status = statusOf(choice.finishReason);
    const output = outputItems(choice.text, status, parsed.toolFormat);
    const usage = deps.generation.engine.countsTokens
      ? usageOf({ promptTokens: completion.promptTokens, completionTokens: choice.completionTokens, cachedPromptTokens: completion.cachedPromptTokens })
      : null;
    const response = responseObject(head, status, output, usage);
    keep(deps, parsed, response, output);
    res.json(response);
  };
}

function keep(deps: ResponsesDeps, parsed: ParsedResponseRequest, response: StoredResponse["response"], output: readonly OutputItem[]): void {
  if (!parsed.store) return;
  for (const item of output) deps.store.set(item.id, { item });
  const stored = deps.store.set(response.id, { response, conversation: [...parsed.conversation, ...outputMessages(output)] });
  if (!stored) deps.generation.logger.warn({ response: response.id }, "a response larger than the whole response store was not stored");
}

/**
 * The Responses event sequence over the app's one stream loop: response.created and
 * response.in_progress when the stream opens; then the output items as the text comes
 * (events.ts: a message's text deltas; with tools, each call parsed from the text as it is
 * written, its arguments in deltas); at the end the open item's done events and
 * response.completed (response.incomplete when cut by the token limit) with usage. No
 * [DONE]: the Responses API ends with its terminal event.
 */
async function streamResponse(deps: ResponsesDeps, res: Response, parsed: ParsedResponseRequest, head: ResponseHead): Promise<void> {
  const out = new OutputEvents();
  const parser = parsed.toolFormat ? new ToolCallStreamParser(parsed.toolFormat) : undefined;
  let finish: FinishReason | undefined;
  let cachedPromptTokens: number | undefined;
  const written = (pieces: readonly StreamPiece[]): string =>
    pieces
      .map((piece) => {
        if (piece.kind === "content") return out.text(piece.text);
        return (piece.id !== undefined ? out.call(piece.id, piece.name ?? "") : "") + out.arguments(piece.arguments);
      })
      .join("");
  await streamCompletion(deps.generation, res, parsed.request, {
    opening: () => {
      const response = responseObject(head, "in_progress", [], null);
      return [out.event("response.created", { response }), out.event("response.in_progress", { response })];
    },
    chunk: (chunk: CompletionChunk) => {
      if (chunk.finishReason) finish = chunk.finishReason;
      if (chunk.cachedPromptTokens !== undefined) cachedPromptTokens = chunk.cachedPromptTokens;
      const events = parser
        ? written([...parser.push(chunk.text), ...(chunk.finishReason ? parser.finish() : [])])
        : chunk.text
          ? out.text(chunk.text)
          : "";
      return events || undefined;
    },
    closing: ({ promptTokens, completionTokens }) => {
      const status = statusOf(finish);
      const events = out.finish(status);
      const usage = deps.generation.engine.countsTokens ? usageOf({ promptTokens, completionTokens, cachedPromptTokens }) : null;
      const response = responseObject(head, status, out.items, usage);
      keep(deps, parsed, response, out.items);
      return [events + out.event(status === "incomplete" ? "response.incomplete" : "response.completed", { response })];
    },
    failure: (err) => {
      const { error } = openAiError(err).body;
      return out.event("error", { code: error.code, message: error.message, param: error.param });
    },
    done: "",
  });
}
