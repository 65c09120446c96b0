/**
 * The spec's routes, POST /generate (batched) and POST /generate/stream, as wire adapters
 * over the app's one generation pipeline (generation.ts): each validates its body into a
 * request and formats what the engine gives back, `{text, latency_ms}` or `data: {"token"}`
 * events.
 */
import { performance } from "node:perf_hooks";
import type { RequestHandler } from "express";
import { errorBody } from "../shell/errorResponse.js";
import { completeAll, streamCompletion, type Generation, type StreamFormat } from "./generation.js";
import { jsonBody } from "../shell/jsonBody.js";
import { arrivalOf } from "../shell/requestContext.js";
import { COMMON_ERRORS, TOO_LARGE, json, ref, type RouteDescriptor } from "../shell/routes.js";
import { generateRequestSchema, generateResponseSchema, streamChunkSchema } from "./schemas.js";
import { dataEvent, errorEvent } from "./sse.js";
import { parseGenerateRequest } from "./validation.js";

export function generateRoutes(generation: Generation): RouteDescriptor[] {
  const body = { required: true, content: json(ref("GenerateRequest"), { prompt: "Once upon a time", max_new_tokens: 4, seed: 1 }) };
  return [
    {
      method: "post",
      path: "/generate",
      schemas: { GenerateRequest: generateRequestSchema, GenerateResponse: generateResponseSchema },
      doc: {
        summary: "Continue a prompt. Requests are grouped into batches for the engine.",
        operationId: "generate",
        requestBody: body,
        responses: {
          "200": { description: "The continuation.", content: json(ref("GenerateResponse")) },
          ...TOO_LARGE,
          ...COMMON_ERRORS,
        },
      },
      handlers: [jsonBody(), generateHandler(generation)],
    },
    {
      method: "post",
      path: "/generate/stream",
      schemas: { GenerateRequest: generateRequestSchema, StreamChunk: streamChunkSchema },
      doc: {
        summary: "Continue a prompt, piece by piece, as server-sent events. Not batched.",
        operationId: "generateStream",
        requestBody: body,
        responses: {
          "200": { description: `${streamChunkSchema.description}`, content: { "text/event-stream": { schema: { type: "string" } } } },
          ...TOO_LARGE,
          ...COMMON_ERRORS,
        },
      },
      handlers: [jsonBody(), streamHandler(generation)],
    },
  ];
}

function generateHandler(generation: Generation): RequestHandler {
  return async (req, res) => {
    const completions = await completeAll(generation, res, [parseGenerateRequest(req.body)]);
    if (!completions) return;
    res.json({ text: completions[0]!.choices[0]!.text, latency_ms: performance.now() - arrivalOf(res) });
  };
}

/**
 * One `data: {"token"}` event per piece the engine produced (an empty piece too; a choice's
 * closing chunk only when it carries text); after a failure, `event: error` with the
 * project's error body.
 */
const TOKEN_EVENTS: StreamFormat = {
  opening: () => [],
  chunk: (chunk) => (chunk.finishReason === undefined || chunk.text ? dataEvent({ token: chunk.text }) : undefined),
  closing: () => [],
  failure: (err) => errorEvent(errorBody(err)),
};

function streamHandler(generation: Generation): RequestHandler {
  return async (req, res) => {
    await streamCompletion(generation, res, parseGenerateRequest(req.body), TOKEN_EVENTS);
  };
}
