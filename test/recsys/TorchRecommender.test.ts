/**
 * TorchRecommender's own behaviour against an in-process module (no addon, no Python):
 * known and unknown users, k handling, fallbacks, batching, lifecycle, configuration.
 */
import { expect } from "chai";
import { ServingError } from "../../src/errors.js";
import {
  TorchRecommender,
  type FallbackReason,
  type TorchRecommenderOptions,
} from "../../src/recsys/index.js";
import {
  CONFIG,
  FakeRecommenderModule,
  ITEM_IDS,
  POPULAR_IDS,
  SEEN,
  USER_IDS,
  deferred,
  expectedTopK,
  fakeAddon,
  writeCheckpoint,
} from "./fakeModule.js";

async function rejection(promise: Promise<unknown>): Promise<ServingError> {
  try {
    await promise;
  } catch (err) {
    expect(err).to.be.instanceOf(ServingError);
    return err as ServingError;
  }
  expect.fail("expected a rejection");
}

describe("TorchRecommender with an in-process module", () => {
  let module: FakeRecommenderModule;
  let rec: TorchRecommender;

  async function open(options: TorchRecommenderOptions = {}): Promise<TorchRecommender> {
    module = new FakeRecommenderModule();
    rec = await TorchRecommender.fromModule(module, options);
    module.recommendBatches.length = 0; // forget the warm-up calls
    return rec;
  }

  afterEach(async () => {
    module.gate = null;
    await rec?.dispose();
  });

  it("gives a known user its k best unseen items, in score order, not as a fallback", async () => {
    await open();
    for (const [index, userId] of USER_IDS.entries()) {
      const result = await rec.recommend(userId, 2);
      expect(result).to.deep.equal({ items: expectedTopK(index, 2), fallback: false });
      const seenIds = SEEN[index]!.map((i) => ITEM_IDS[i]);
      expect(result.items.filter((id) => seenIds.includes(id))).to.deep.equal([]);
    }
  });

  it("gives an unknown user the k most popular items as a fallback", async () => {
    await open();
    const result = await rec.recommend(2, 5); // 2 lies in a gap of the raw user ids
    expect(result).to.deep.equal({ items: POPULAR_IDS.slice(0, 5), fallback: true, fallbackReason: "unknown_user" });
  });

  it("handles k = 1 and k beyond the catalogue (as many items as exist)", async () => {
    await open();
    expect((await rec.recommend(USER_IDS[0]!, 1)).items).to.deep.equal(expectedTopK(0, 1));
    const all = await rec.recommend(USER_IDS[2]!, 100); // has seen nothing
    expect(all.items).to.have.lengthOf(ITEM_IDS.length);
    expect(new Set(all.items)).to.deep.equal(new Set(ITEM_IDS));
    // User 7 has seen all but two items: the module pads, the padding never reaches the caller.
    expect(await rec.recommend(USER_IDS[7]!, 5)).to.deep.equal({ items: expectedTopK(7, 5), fallback: false });
    expect((await rec.recommend(USER_IDS[7]!, 5)).items).to.have.lengthOf(2);
    expect((await rec.recommend(999_999, 100)).items).to.deep.equal(POPULAR_IDS);
  });

  it("falls back to popular items when the module fails, logs it, and recovers", async () => {
    const warnings: object[] = [];
    const reasons: FallbackReason[] = [];
    await open({ logger: { warn: (obj) => warnings.push(obj) }, onFallback: (r) => reasons.push(r) });
    module.failWith = Object.assign(new Error("CUDA out of memory"), { code: "ERR_INFERENCE" });
    const result = await rec.recommend(USER_IDS[1]!, 3);
    expect(result).to.deep.equal({ items: POPULAR_IDS.slice(0, 3), fallback: true, fallbackReason: "model_error" });
    expect(warnings).to.have.lengthOf(1);
    expect(reasons).to.deep.equal(["model_error"]);
    module.failWith = null;
    expect(await rec.recommend(USER_IDS[1]!, 3)).to.deep.equal({ items: expectedTopK(1, 3), fallback: false });
    expect(rec.stats().fallbacks).to.deep.equal({ unknown_user: 0, model_error: 1, latency_budget: 0, overloaded: 0 });
  });

  it("falls back when the model misses the latency budget", async () => {
    await open({ latencyBudgetMs: 10 });
    const held = deferred();
    module.gate = held.promise; // the model never answers within the budget
    const result = await rec.recommend(USER_IDS[3]!, 4);
    expect(result).to.deep.equal({ items: POPULAR_IDS.slice(0, 4), fallback: true, fallbackReason: "latency_budget" });
    held.resolve();
    module.gate = null;
    expect(await rec.recommend(USER_IDS[3]!, 4)).to.deep.equal({ items: expectedTopK(3, 4), fallback: false });
  });

  it("does not score a request whose budget ran out while it was queued", async () => {
    await open({ latencyBudgetMs: 20, maxBatchSize: 1 });
    const held = deferred();
    module.gate = held.promise;
    const inFlight = rec.recommend(USER_IDS[0]!, 2); // its batch waits at the gate
    const queued = rec.recommend(USER_IDS[1]!, 2); // waits behind it, past its budget
    const late = { items: POPULAR_IDS.slice(0, 2), fallback: true, fallbackReason: "latency_budget" };
    expect(await inFlight).to.deep.equal(late);
    expect(await queued).to.deep.equal(late);
    held.resolve();
    module.gate = null;
    // The next request is scored at once: the queued one was dropped, not run.
    expect(await rec.recommend(USER_IDS[2]!, 2)).to.deep.equal({ items: expectedTopK(2, 2), fallback: false });
    expect(module.recommendBatches).to.deep.equal([1, 1]);
    expect(rec.stats().fallbacks.latency_budget).to.equal(2);
  });

  it("answers concurrent requests under a budget, each with its own items", async () => {
    await open({ latencyBudgetMs: 1000 });
    const results = await Promise.all(USER_IDS.map((id, index) => rec.recommend(id, 3).then((r) => [index, r] as const)));
    for (const [index, result] of results) expect(result).to.deep.equal({ items: expectedTopK(index, 3), fallback: false });
  });

  it("falls back when the queue is full", async () => {
    await open({ latencyBudgetMs: null, maxBatchSize: 1, maxQueueSize: 1 });
    const held = deferred();
    module.gate = held.promise;
    const inFlight = rec.recommend(USER_IDS[0]!, 2);
    const queued = rec.recommend(USER_IDS[1]!, 2);
    const rejected = await rec.recommend(USER_IDS[2]!, 2);
    expect(rejected).to.deep.equal({ items: POPULAR_IDS.slice(0, 2), fallback: true, fallbackReason: "overloaded" });
    held.resolve();
    expect(await inFlight).to.deep.equal({ items: expectedTopK(0, 2), fallback: false });
    expect(await queued).to.deep.equal({ items: expectedTopK(1, 2), fallback: false });
  });

  it("scores concurrent requests in few batched module calls, each with its own answer", async () => {
    await open({ maxBatchSize: 16, latencyBudgetMs: null });
    const requests = Array.from({ length: 48 }, (_, n) => ({ index: n % USER_IDS.length, k: 1 + (n % 5) }));
    const results = await Promise.all(requests.map((r) => rec.recommend(USER_IDS[r.index]!, r.k)));
    results.forEach((result, n) => {
      expect(result).to.deep.equal({ items: expectedTopK(requests[n]!.index, requests[n]!.k), fallback: false });
    });
    const batches = module.recommendBatches;
    expect(batches.reduce((a, b) => a + b, 0)).to.equal(48);
    expect(batches.length).to.be.at.most(4); // 48 requests, at most 16 a call (+1 dispatched alone)
    expect(Math.max(...batches)).to.equal(16);
    expect(rec.stats().modelCalls).to.equal(batches.length);
  });

  it("mixes known and unknown users in one burst", async () => {
    await open({ latencyBudgetMs: null });
    const [known, unknown] = await Promise.all([rec.recommend(USER_IDS[4]!, 3), rec.recommend(-5, 3)]);
    expect(known).to.deep.equal({ items: expectedTopK(4, 3), fallback: false });
    expect(unknown.fallback).to.equal(true);
    expect(unknown.items).to.deep.equal(POPULAR_IDS.slice(0, 3));
  });

  it("rejects a k that is not a positive integer", async () => {
    await open();
    expect((await rejection(rec.recommend(USER_IDS[0]!, 0))).code).to.equal("ERR_INVALID_ARGUMENT");
    expect((await rejection(rec.recommend(USER_IDS[0]!, 2.5))).code).to.equal("ERR_INVALID_ARGUMENT");
  });

  it("finishes queued requests on dispose, disposes once, then refuses work", async () => {
    await open({ latencyBudgetMs: null });
    const pending = [rec.recommend(USER_IDS[5]!, 2), rec.recommend(USER_IDS[6]!, 2)];
    const first = rec.dispose();
    const second = rec.dispose();
    await Promise.all([first, second]);
    expect(await Promise.all(pending)).to.deep.equal([
      { items: expectedTopK(5, 2), fallback: false },
      { items: expectedTopK(6, 2), fallback: false },
    ]);
    expect(module.disposed).to.equal(1);
    expect((await rejection(rec.recommend(USER_IDS[5]!, 2))).code).to.equal("ERR_DISPOSED");
  });

  it("refuses a module of another interface version and disposes it", async () => {
    const wrong = new FakeRecommenderModule({ ...CONFIG, interface_version: 2 });
    const err = await rejection(TorchRecommender.fromModule(wrong));
    expect(err.code).to.equal("ERR_CHECKPOINT_INTERFACE");
    expect(err.message).to.match(/interface_version/);
    expect(wrong.disposed).to.equal(1);
    module = new FakeRecommenderModule();
  });
});

describe("TorchRecommender.load", () => {
  it("verifies the checksum beside the checkpoint and loads through the addon", async () => {
    const path = writeCheckpoint(Buffer.from("checkpoint bytes"));
    const addon = fakeAddon();
    const rec = await TorchRecommender.load(path, { addon, device: "cpu" });
    try {
      expect(addon.loads).to.have.lengthOf(1);
      expect(addon.loads[0]!.options).to.include({ device: "cpu" });
      expect(addon.loads[0]!.options.extraFiles).to.deep.equal(["config.json", "movies.json"]);
      expect(await rec.recommend(USER_IDS[0]!, 2)).to.deep.equal({ items: expectedTopK(0, 2), fallback: false });
    } finally {
      await rec.dispose();
    }
  });

  it("refuses a checkpoint whose bytes do not match its .sha256, before loading it", async () => {
    const original = Buffer.from("checkpoint bytes");
    const corrupted = Buffer.from("checkpoint bytez");
    const path = writeCheckpoint(corrupted, original);
    const addon = fakeAddon();
    const err = await rejection(TorchRecommender.load(path, { addon }));
    expect(err.code).to.equal("ERR_CHECKPOINT_INVALID");
    expect(err.message).to.match(/sha256/);
    expect(addon.loads).to.deep.equal([]);
  });
});

describe("TorchRecommender display data (movies.json, history)", () => {
  it("reads titles from movies.json; a checkpoint without it or without history gives none", async () => {
    const module = new FakeRecommenderModule();
    module.extraFiles["movies.json"] = JSON.stringify({ "10": { title: "Heat, Part 2 (1995)", genres: ["Crime"] }, "x": { title: "bad id" } });
    const rec = await TorchRecommender.fromModule(module);
    try {
      expect(rec.hasTitles).to.equal(true);
      expect(rec.movies([10, 20])).to.deep.equal([
        { id: 10, title: "Heat, Part 2 (1995)", genres: ["Crime"] },
        { id: 20, title: null, genres: [] },
      ]);
      // CONFIG has no history_length: an older checkpoint, so no module call is tried.
      expect(await rec.history(USER_IDS[0]!, 5)).to.deep.equal({ known: true, ratings: [] });
      expect(await rec.history(999, 5)).to.deep.equal({ known: false, ratings: [] });
      try {
        await rec.history(1.5, 5);
        expect.fail("accepted a fractional user id");
      } catch (err) {
        expect((err as ServingError).code).to.equal("ERR_INVALID_ARGUMENT");
      }
    } finally {
      await rec.dispose();
    }
  });

  it("refuses a checkpoint whose movies.json is not JSON", async () => {
    const module = new FakeRecommenderModule();
    module.extraFiles["movies.json"] = "{not json";
    try {
      await TorchRecommender.fromModule(module);
      expect.fail("loaded a broken movies.json");
    } catch (err) {
      expect((err as ServingError).code).to.equal("ERR_CHECKPOINT_INTERFACE");
      expect((err as Error).message).to.contain("movies.json is not JSON");
    }
    expect(module.disposed).to.equal(1);
  });
});
