/** The logging surface the HTTP layer needs; a pino logger fits it. */
export interface Logger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = (): void => {};

/** Default: the HTTP layer is silent unless the caller hands it a logger. */
export const silentLogger: Logger = { info: noop, warn: noop, error: noop };
