/**
 * An in-process RawModule speaking the recommender interface (docs/recommender.md), for
 * tests of TorchRecommender's own logic (batching, fallback, k handling) without the addon.
 * Scores are a fixed, tie-free function of (user, item); each user has seen a few items.
 */
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RawAddon, RawLoadOptions, RawModule, RawTensor, RawValue } from "../../src/native/types.js";
import { makeTempDir } from "./pythonFixture.js";

export const USER_IDS = [1, 3, 4, 8, 9, 15, 16, 23]; // raw ids with gaps
// Sparse raw ids; two need more than 31 bits (the recommender reads ids through int32 halves).
export const ITEM_IDS = [10, 20, 35, 40, 70, 71, 90, 120, 300, 301, 3_000_000_000, 5_000_000_000];
/** Item indices by popularity, most popular first. */
export const POPULAR_ORDER = [4, 0, 9, 2, 7, 1, 11, 3, 5, 10, 6, 8];
/** Internal user index -> internal item indices seen. User 7 has seen all but two items. */
export const SEEN: number[][] = [[0, 4], [1], [], [2, 3, 9], [4], [0, 1, 2], [11], [0, 1, 2, 3, 4, 5, 6, 7, 8, 10]];

export function score(user: number, item: number): number {
  return Math.sin(user * 12.9898 + item * 78.233) * 0.5 + item * 1e-4;
}

/** What recommend(users=[user], k) returns, computed independently of the fake's code path. */
export function expectedTopK(user: number, k: number): number[] {
  return ITEM_IDS.map((_, item) => item)
    .filter((item) => !SEEN[user]!.includes(item))
    .sort((a, b) => score(user, b) - score(user, a))
    .slice(0, k)
    .map((item) => ITEM_IDS[item]!);
}

export const POPULAR_IDS = POPULAR_ORDER.map((i) => ITEM_IDS[i]!);

export const CONFIG = {
  format: "torchserve-node/recommender",
  interface_version: 1,
  counts: { users: USER_IDS.length, items: ITEM_IDS.length, interactions: SEEN.flat().length },
  factors: 0,
};

export class FakeRecommenderModule implements RawModule {
  readonly extraFiles: Record<string, string>;
  readonly device = "cpu";
  /** Batch sizes of every `recommend` call, in order. */
  readonly recommendBatches: number[] = [];
  /** When set, `recommend` rejects with this error. */
  failWith: Error | null = null;
  /** When set, `recommend` waits for this promise before answering. */
  gate: Promise<void> | null = null;
  disposed = 0;

  constructor(config: object = CONFIG) {
    this.extraFiles = { "config.json": JSON.stringify(config) };
  }

  async run(method: string, args: RawValue[]): Promise<RawValue> {
    switch (method) {
      case "interface_version":
        return 1;
      case "user_ids":
        return int64([USER_IDS.length], USER_IDS);
      case "item_ids":
        return int64([ITEM_IDS.length], ITEM_IDS);
      case "popular": {
        const k = Math.min(args[0] as number, ITEM_IDS.length);
        return int64([k], POPULAR_IDS.slice(0, k));
      }
      case "recommend":
        return this.recommend(args[0] as RawTensor, args[1] as number);
      default:
        throw Object.assign(new Error(`no method ${method}`), { code: "ERR_CHECKPOINT_INTERFACE" });
    }
  }

  async dispose(): Promise<void> {
    this.disposed++;
  }

  private async recommend(users: RawTensor, k: number): Promise<RawValue> {
    this.recommendBatches.push(users.shape[0]!);
    if (this.gate) await this.gate;
    if (this.failWith) throw this.failWith;
    const rows = Array.from(users.data as BigInt64Array, Number);
    const ids: number[] = [];
    const scores: number[] = [];
    for (const user of rows) {
      const ranked = ITEM_IDS.map((_, item) => ({
        item,
        s: SEEN[user]!.includes(item) ? -Infinity : score(user, item),
      })).sort((a, b) => b.s - a.s);
      for (let j = 0; j < k; j++) {
        const entry = ranked[j];
        const pad = entry === undefined || entry.s === -Infinity;
        ids.push(pad ? -1 : ITEM_IDS[entry.item]!);
        scores.push(pad ? -Infinity : entry.s);
      }
    }
    return [int64([rows.length, k], ids), { dtype: "float32", shape: [rows.length, k], data: Float32Array.from(scores) }];
  }
}

function int64(shape: number[], values: number[]): RawTensor {
  return { dtype: "int64", shape, data: BigInt64Array.from(values, BigInt) };
}

/** A promise and its resolver, to hold the fake's `recommend` until a test releases it. */
export function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** An addon whose modules are the in-process fake; records what it was asked. */
export function fakeAddon(): RawAddon & { loads: Array<{ path: string; options: RawLoadOptions }> } {
  const loads: Array<{ path: string; options: RawLoadOptions }> = [];
  return {
    loads,
    torchVersion: "fake",
    withoutLibtorch: false,
    errorCodes: [],
    kernelFamilies: ["baseline"],
    nativeArchitectures: [],
    decideRuntime: () => ({ runtime: "torchscript", timed: false, reason: "fake" }),
    cudaAvailable: () => false,
    cudaDeviceCount: () => 0,
    async loadModule(path, options) {
      loads.push({ path, options });
      return new FakeRecommenderModule();
    },
    async loadLanguageModel() {
      throw new Error("not a language model addon");
    },
  };
}

/** A checkpoint file of these bytes, with a .sha256 of `checksumOf` beside it. */
export function writeCheckpoint(bytes: Buffer, checksumOf: Buffer = bytes): string {
  const path = join(makeTempDir("ckpt-"), "model.pt");
  writeFileSync(path, bytes);
  writeFileSync(`${path}.sha256`, `${createHash("sha256").update(checksumOf).digest("hex")}  model.pt\n`);
  return path;
}
