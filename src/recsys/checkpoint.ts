/**
 * The recommender checkpoint's contract (docs/recommender.md): config.json, the module's
 * methods and the shapes they return. Reading a loaded module checks it against that
 * contract and warms its scoring path up; anything amiss is ERR_CHECKPOINT_INTERFACE.
 */
import { ServingError } from "../errors.js";
import type { RawModule, RawTensor, RawValue } from "../native/types.js";

export const RECOMMENDER_FORMAT = "torchserve-node/recommender";
export const RECOMMENDER_INTERFACE_VERSION = 1;

/** Contents of the checkpoint's config.json that the server relies on. */
export interface RecommenderConfig {
  format: string;
  interface_version: number;
  counts: { users: number; items: number; interactions?: number };
  [key: string]: unknown;
}

/** What a checkpoint holds for serving, read once at load. */
export interface RecommenderCheckpoint {
  config: RecommenderConfig;
  /** Raw user ids, by internal index. */
  userIds: BigInt64Array;
  /** Raw item ids, most popular first: the fallback. */
  popular: BigInt64Array;
  /** Whether the module stores recent history (`history_length` in config.json). */
  hasHistory: boolean;
}

/**
 * Checks a loaded module (it must carry config.json) against the
 * interface, reads the user ids and the popular items, and calls `recommend` for a lone user
 * and for a batch of `warmupBatch`: TorchScript's profiling executor optimises on the first
 * calls of a shape (the first costs ~100 ms), paid here rather than by the first requests.
 */
export async function readCheckpoint(module: RawModule, warmupBatch: number): Promise<RecommenderCheckpoint> {
  const config = parseConfig(module.extraFiles["config.json"]);
  const version = await module.run("interface_version", []);
  if (version !== RECOMMENDER_INTERFACE_VERSION) {
    throw interfaceError(`module interface_version() is ${String(version)}, expected ${RECOMMENDER_INTERFACE_VERSION}`);
  }
  const userIds = int64Vector(await module.run("user_ids", []), "user_ids()");
  const popular = int64Vector(await module.run("popular", [config.counts.items]), "popular(k)");
  if (userIds.length !== config.counts.users || popular.length !== config.counts.items) {
    throw interfaceError(
      `config.json counts (${config.counts.users} users, ${config.counts.items} items) disagree with the ` +
        `module (${userIds.length} users, ${popular.length} popular items)`,
    );
  }
  const k = Math.min(10, config.counts.items);
  const sizes = new Set([1, Math.min(warmupBatch, userIds.length)]);
  for (const size of userIds.length > 0 ? sizes : []) {
    const probe: RawTensor = { dtype: "int64", shape: [size], data: BigInt64Array.from({ length: size }, (_, i) => BigInt(i)) };
    for (let i = 0; i < 2; i++) {
      const result = await module.run("recommend", [probe, k]);
      try {
        recommendIds(result, size, k);
      } catch (err) {
        throw interfaceError((err as Error).message);
      }
    }
  }
  return { config, userIds, popular, hasHistory: Number.isSafeInteger(config["history_length"]) };
}

export function interfaceError(message: string): ServingError {
  return new ServingError("ERR_CHECKPOINT_INTERFACE", `not a ${RECOMMENDER_FORMAT} checkpoint: ${message}`);
}

function parseConfig(text: string | undefined): RecommenderConfig {
  if (text === undefined) throw interfaceError("config.json is missing from the archive");
  let config: RecommenderConfig;
  try {
    config = JSON.parse(text) as RecommenderConfig;
  } catch (err) {
    throw interfaceError(`config.json is not JSON (${(err as Error).message})`);
  }
  if (config?.format !== RECOMMENDER_FORMAT) throw interfaceError(`config.json format is ${String(config?.format)}`);
  if (config.interface_version !== RECOMMENDER_INTERFACE_VERSION) {
    throw interfaceError(
      `config.json interface_version is ${String(config.interface_version)}, this server speaks ${RECOMMENDER_INTERFACE_VERSION}`,
    );
  }
  const { users, items } = config.counts ?? {};
  if (!Number.isSafeInteger(users) || !Number.isSafeInteger(items) || users < 0 || items < 0) {
    throw interfaceError("config.json counts.users / counts.items are missing");
  }
  return config;
}

export function isTensor(value: RawValue): value is RawTensor {
  return typeof value === "object" && value !== null && !Array.isArray(value) && "dtype" in value;
}

function int64Vector(value: RawValue, what: string): BigInt64Array {
  if (!isTensor(value) || value.dtype !== "int64" || value.shape.length !== 1) {
    throw interfaceError(`${what} must return a 1-D int64 tensor`);
  }
  return value.data as BigInt64Array;
}

/** The ids of `recommend`'s (ids[B,k] int64, scores[B,k] float32) result, shape-checked. */
export function recommendIds(value: RawValue, rows: number, width: number): BigInt64Array {
  if (!Array.isArray(value) || value.length !== 2 || !isTensor(value[0]!) || !isTensor(value[1]!)) {
    throw new ServingError("ERR_INFERENCE", "recommend() must return a (ids, scores) tuple of tensors");
  }
  const ids = value[0];
  if (ids.dtype !== "int64" || ids.shape.length !== 2 || ids.shape[0] !== rows || ids.shape[1] !== width) {
    throw new ServingError(
      "ERR_INFERENCE",
      `recommend() returned ids ${ids.dtype}[${ids.shape.join(",")}], expected int64[${rows},${width}]`,
    );
  }
  return ids.data as BigInt64Array;
}
