/** POST /generate: validate, queue for the batcher, answer with the request's own text. */
import { performance } from "node:perf_hooks";
import type { RequestHandler } from "express";
import type { Batcher } from "../batching/Batcher.js";
import type { GenerateRequest } from "../types.js";
import { disconnectSignal } from "./disconnect.js";
import { arrivalOf } from "./requestContext.js";
import { parseGenerateRequest } from "./validation.js";

export function generateHandler(batcher: Batcher<GenerateRequest, string>): RequestHandler {
  return async (req, res) => {
    const request = parseGenerateRequest(req.body);
    // A client that leaves while queued is dropped from the queue; once its batch runs,
    // the same signal lets the engine stop its row.
    const signal = disconnectSignal(res);
    request.signal = signal;
    let text: string;
    try {
      text = await batcher.submit(request, signal);
    } catch (err) {
      if (signal.aborted) return; // nobody is listening
      throw err;
    }
    if (signal.aborted) return;
    res.json({ text, latency_ms: performance.now() - arrivalOf(res) });
  };
}
