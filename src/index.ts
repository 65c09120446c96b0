/** Public entry of the package. */
export type * from "./types.js";
export { ErrorCodes, ServingError, statusOf, type ErrorCode } from "./errors.js";
export { TorchEngine, type TorchEngineOptions } from "./engine/TorchEngine.js";
export { createEngineFromEnv, createRecommenderFromEnv } from "./server/fromEnv.js";
export { ByteTokenizer, HuggingFaceTokenizer, type Tokenizer, type StreamDecoder } from "./engine/tokenizer.js";
export { parseModelConfig, type ModelConfig } from "./engine/config.js";
export { verifyChecksum } from "./checkpoint/verify.js";
export * from "./http/index.js";
export * from "./recsys/index.js";
