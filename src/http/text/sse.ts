/** Server-sent events framing for /generate/stream. */
import { once } from "node:events";
import type { Response } from "express";

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  "Content-Type": "text/event-stream",
  // no-transform: proxies must not compress (and so buffer) the stream.
  "Cache-Control": "no-cache, no-transform",
  // nginx: do not buffer this response.
  "X-Accel-Buffering": "no",
};

export const DONE_EVENT = "data: [DONE]\n\n";

/** JSON never contains a raw newline, so one `data:` line always holds the whole value. */
export function dataEvent(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

export function errorEvent(value: unknown): string {
  return `event: error\n${dataEvent(value)}`;
}

/** Commits the 200 and sends the headers now, so the client sees the stream open. */
export function openEventStream(res: Response): void {
  res.status(200);
  for (const [name, value] of Object.entries(SSE_HEADERS)) res.setHeader(name, value);
  res.socket?.setNoDelay(true);
  res.flushHeaders();
}

/** Writes one event; waits for the socket to drain when the client reads slowly. */
export async function writeEvent(res: Response, event: string, signal: AbortSignal): Promise<void> {
  if (res.write(event)) return;
  try {
    await once(res, "drain", { signal });
  } catch {
    // Aborted: the client is gone; the caller checks the signal.
  }
}
