/**
 * Every wire schema of both apps, for the package's `schemas` export: the shared ones
 * (shell/schemas.ts) and each app's own (text/schemas.ts, recsys/schemas.ts).
 */
export {
  MAX_BODY_BYTES,
  errorSchema,
  healthResponseSchema,
  readyResponseSchema,
  validationErrorSchema,
  type JsonSchema,
} from "./shell/schemas.js";
export * from "./text/schemas.js";
export * from "./recsys/schemas.js";
