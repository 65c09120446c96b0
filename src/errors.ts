/**
 * One catalogue of error codes for every layer. The addon sets the same `code` strings on
 * the errors it raises; the HTTP layer maps a code to its status here and nowhere else.
 */
export const ErrorCodes = {
  /** A required environment variable is missing or malformed. */
  ERR_CONFIG: 500,
  /** The native addon could not be loaded (not built, libtorch missing, wrong ABI). */
  ERR_ADDON_LOAD: 500,
  ERR_CHECKPOINT_NOT_FOUND: 500,
  /** Corrupt, truncated or checksum-mismatched checkpoint file. */
  ERR_CHECKPOINT_INVALID: 500,
  /** The module lacks a method of the serving interface, or has another version. */
  ERR_CHECKPOINT_INTERFACE: 500,
  /** Malformed device string, or a device this libtorch build cannot use. */
  ERR_DEVICE: 500,
  ERR_INVALID_ARGUMENT: 400,
  /**
   * The addon built without libtorch cannot serve this checkpoint so (neither a remembered verdict
   * of the load-time check nor reference logits stored at export let it): TorchEngine then loads
   * it with the libtorch addon. Internal.
   */
  ERR_NEEDS_LIBTORCH: 500,
  /** The engine was disposed before or while the call ran. */
  ERR_DISPOSED: 503,
  ERR_CANCELLED: 499,
  /** libtorch failed while running the model. */
  ERR_INFERENCE: 500,
  ERR_VALIDATION: 422,
  /** An API key is required (API_KEYS) and none, or an unknown one, was sent. */
  ERR_UNAUTHORIZED: 401,
  /** A /v1 request names a model this server does not serve. */
  ERR_MODEL_NOT_FOUND: 404,
  ERR_PAYLOAD_TOO_LARGE: 413,
  ERR_RATE_LIMITED: 429,
  /** The batch queue is full. */
  ERR_QUEUE_FULL: 503,
  /** Outside the app's lifespan (before start() or after stop()). */
  ERR_NOT_SERVING: 503,
  ERR_NOT_FOUND: 404,
  /** The path exists, with other methods (see the Allow header). */
  ERR_METHOD_NOT_ALLOWED: 405,
  ERR_INTERNAL: 500,
  /** The limit of concurrent streams (MAX_ACTIVE_STREAMS) is reached; retry after Retry-After. */
  ERR_TOO_MANY_STREAMS: 503,
  /** The app is loading or draining: GET /ready. */
  ERR_NOT_READY: 503,
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export class ServingError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly detail?: unknown;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; detail?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ServingError";
    this.code = code;
    this.status = ErrorCodes[code];
    this.detail = options?.detail;
  }
}

/** HTTP status for any error: ours by code, an addon error by its `.code`, else 500. */
export function statusOf(err: unknown): number {
  if (err instanceof ServingError) return err.status;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string" && code in ErrorCodes) return ErrorCodes[code as ErrorCode];
  return 500;
}

/** Wraps an addon error (plain Error with a `.code`) into a ServingError, keeping the cause. */
export function asServingError(err: unknown, fallback: ErrorCode = "ERR_INTERNAL"): ServingError {
  if (err instanceof ServingError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  const known = typeof code === "string" && code in ErrorCodes ? (code as ErrorCode) : fallback;
  const message = err instanceof Error ? err.message : String(err);
  return new ServingError(known, message, { cause: err });
}
