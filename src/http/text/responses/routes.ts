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
import {
  messageItem,
  newItemId,
  outputMessages,
  outputText,
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
    const output = [messageItem(newItemId("msg"), choice.text, status)];
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
 * response.in_progress when the stream opens; the message item and its text part when the
 * first text arrives, then output_text deltas; at the end the done events of the text, part
 * and item, and response.completed (response.incomplete when cut by the token limit) with
 * usage. Every event carries its type and a sequence_number. No [DONE]: the Responses API
 * ends with its terminal event.
 */
async function streamResponse(deps: ResponsesDeps, res: Response, parsed: ParsedResponseRequest, head: ResponseHead): Promise<void> {
  let sequence = 0;
  const event = (type: string, body: object): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...body, sequence_number: sequence++ })}\n\n`;
  const itemId = newItemId("msg");
  const at = { item_id: itemId, output_index: 0, content_index: 0 };
  let text = "";
  let opened = false;
  let finish: FinishReason | undefined;
  let cachedPromptTokens: number | undefined;
  const openMessage = (): string => {
    if (opened) return "";
    opened = true;
    return (
      event("response.output_item.added", { output_index: 0, item: messageItem(itemId, undefined, "in_progress") }) +
      event("response.content_part.added", { ...at, part: outputText("") })
    );
  };
  await streamCompletion(deps.generation, res, parsed.request, {
    opening: () => {
      const response = responseObject(head, "in_progress", [], null);
      return [event("response.created", { response }), event("response.in_progress", { response })];
    },
    chunk: (chunk: CompletionChunk) => {
      if (chunk.finishReason) finish = chunk.finishReason;
      if (chunk.cachedPromptTokens !== undefined) cachedPromptTokens = chunk.cachedPromptTokens;
      if (!chunk.text) return undefined;
      text += chunk.text;
      return openMessage() + event("response.output_text.delta", { ...at, delta: chunk.text, logprobs: [] });
    },
    closing: ({ promptTokens, completionTokens }) => {
      const status = statusOf(finish);
      const item = messageItem(itemId, text, status);
      const usage = deps.generation.engine.countsTokens ? usageOf({ promptTokens, completionTokens, cachedPromptTokens }) : null;
      const response = responseObject(head, status, [item], usage);
      keep(deps, parsed, response, [item]);
      return [
        openMessage() +
          event("response.output_text.done", { ...at, text, logprobs: [] }) +
          event("response.content_part.done", { ...at, part: outputText(text) }) +
          event("response.output_item.done", { output_index: 0, item }) +
          event(status === "incomplete" ? "response.incomplete" : "response.completed", { response }),
      ];
    },
    failure: (err) => {
      const { error } = openAiError(err).body;
      return event("error", { code: error.code, message: error.message, param: error.param });
    },
    done: "",
  });
}
