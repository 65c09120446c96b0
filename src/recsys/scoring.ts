/**
 * Scoring: one batched `recommend` module call for the users of a batch, as wide as their
 * largest k (capped at the catalogue), its ids read back into one list per user.
 */
import { endianness } from "node:os";
import { asServingError } from "../errors.js";
import type { RawModule, RawTensor } from "../native/types.js";
import { recommendIds } from "./checkpoint.js";

/** int64 ids are read and written through their int32 halves where the host allows it. */
const LITTLE_ENDIAN = endianness() === "LE";

/** One user to score. */
export interface Query {
  /** The user's internal index. */
  readonly index: number;
  readonly k: number;
  /** Set when its latency budget ran out: a batch that still holds it skips it. */
  expired: boolean;
}

export class Scorer {
  /** Module calls made (the warm-up at load is not counted). */
  calls = 0;

  constructor(
    private readonly module: RawModule,
    private readonly itemCount: number,
  ) {}

  /** Raw item ids per query, best first; an expired query gets none and is not scored. */
  async score(batch: Query[]): Promise<number[][]> {
    // Requests whose budget ran out while queued have their answer; they are not scored.
    const queries = batch.some((q) => q.expired) ? batch.filter((q) => !q.expired) : batch;
    if (queries.length === 0) return batch.map(() => []);
    const width = Math.min(this.itemCount, queries.reduce((max, q) => Math.max(max, q.k), 0));
    // int64 words written as (low, high) int32 pairs: no BigInt per user (little-endian hosts).
    const data = new BigInt64Array(queries.length);
    if (LITTLE_ENDIAN) {
      const words = new Int32Array(data.buffer);
      queries.forEach((q, row) => (words[2 * row] = q.index));
    } else {
      queries.forEach((q, row) => (data[row] = BigInt(q.index)));
    }
    const users: RawTensor = { dtype: "int64", shape: [queries.length], data };
    this.calls++;
    let ids: BigInt64Array;
    try {
      ids = recommendIds(await this.module.run("recommend", [users, width]), queries.length, width);
    } catch (err) {
      throw asServingError(err, "ERR_INFERENCE");
    }
    const words = new Int32Array(ids.buffer, ids.byteOffset, ids.length * 2);
    const rows = queries.map((q, row) => {
      const items: number[] = [];
      const end = row * width + Math.min(q.k, width);
      for (let j = row * width; j < end; j++) {
        // Ids are read from their int32 halves (a BigInt per id costs an allocation);
        // one beyond int32 takes the slow path.
        const high = words[2 * j + 1]!;
        const id = LITTLE_ENDIAN && high === 0 ? words[2 * j]! >>> 0 : Number(ids[j]);
        // Padding (id -1) only ever trails a row: a user who has seen almost everything.
        if (id < 0) break;
        items.push(id);
      }
      return items;
    });
    if (queries === batch) return rows;
    let next = 0;
    return batch.map((q) => (q.expired ? [] : rows[next++]!));
  }
}
