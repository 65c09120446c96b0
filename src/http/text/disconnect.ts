/**
 * An AbortSignal that fires when the client goes away before its response was completed.
 * The request's own "close" is no use here: it fires once the body has been read.
 */
import type { Response } from "express";
import { ServingError } from "../../errors.js";

export function disconnectSignal(res: Response): AbortSignal {
  const controller = new AbortController();
  const onClose = (): void => {
    if (!res.writableEnded) controller.abort(new ServingError("ERR_CANCELLED", "client disconnected"));
  };
  res.once("close", onClose);
  // The socket may have closed before this handler ran (its "close" already emitted).
  if (res.socket === null || res.socket.destroyed) onClose();
  return controller.signal;
}
