/** The logging surface the HTTP layer needs; a pino logger fits it. */
export interface LoggerLike {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = (): void => {};

/** Default: the HTTP layer is silent unless the caller hands it a logger. */
export const silentLogger: LoggerLike = { info: noop, warn: noop, error: noop };
