/**
 * The responses kept for GET /v1/responses/{id} and previous_response_id: in this process's
 * memory, bounded in bytes (least recently used first out) and in age. Replicas do not share
 * it: a continuation must reach the replica that answered (sticky routing) or it is a 404.
 */

export interface ResponseStoreOptions {
  /** Most bytes of stored JSON; 0 keeps nothing. */
  maxBytes: number;
  /** Longest an entry is kept after it was stored, ms. */
  ttlMs: number;
  /** The clock, for tests. */
  now?: () => number;
}

export const DEFAULT_RESPONSE_STORE: Readonly<ResponseStoreOptions> = { maxBytes: 64 * 1024 * 1024, ttlMs: 60 * 60 * 1000 };

interface Entry {
  json: string;
  expiresAt: number;
}

/** A bounded LRU of JSON values by id; values are kept serialized, so their size is known and they cannot be mutated. */
export class ResponseStore<T> {
  // A Map iterates in insertion order: re-inserting on use keeps the least recently used first.
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private readonly now: () => number;

  constructor(private readonly options: ResponseStoreOptions = DEFAULT_RESPONSE_STORE) {
    if (!(options.maxBytes >= 0) || !(options.ttlMs > 0)) throw new RangeError("the response store needs maxBytes >= 0 and ttlMs > 0");
    this.now = options.now ?? Date.now;
  }

  /** Entries and their bytes (a string's length: the JSON is mostly ASCII). */
  get size(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }

  /** Stores `value`; false when it alone is larger than the whole store (then nothing is evicted). */
  set(id: string, value: T): boolean {
    const json = JSON.stringify(value);
    this.delete(id);
    if (json.length > this.options.maxBytes) return false;
    this.entries.set(id, { json, expiresAt: this.now() + this.options.ttlMs });
    this.bytes += json.length;
    const now = this.now();
    // Oldest first: what is over the budget, and what has expired (use moves an entry to the end, so stop at the first still live).
    for (const [oldest, { expiresAt }] of this.entries) {
      if (this.bytes <= this.options.maxBytes && expiresAt > now) break;
      this.delete(oldest);
    }
    return true;
  }

  /** The value, or undefined when unknown, evicted or expired. */
  get(id: string): T | undefined {
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.now()) {
      this.delete(id);
      return undefined;
    }
    this.entries.delete(id);
    this.entries.set(id, entry);
    return JSON.parse(entry.json) as T;
  }

  delete(id: string): boolean {
    const entry = this.entries.get(id);
    if (!entry) return false;
    this.entries.delete(id);
    this.bytes -= entry.json.length;
    return true;
  }
}
