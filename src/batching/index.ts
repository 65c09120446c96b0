export { Batcher } from "./Batcher.js";
export type { BatcherHooks, BatcherOptions } from "./Batcher.js";
