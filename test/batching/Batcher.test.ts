import { performance } from "node:perf_hooks";
import { expect } from "chai";
import { Batcher } from "../../src/batching/Batcher.js";
import { ServingError } from "../../src/errors.js";
import { Arrivals, deferred, type Deferred } from "../helpers/deferred.js";

interface Run {
  items: number[];
  result: Deferred<string[]>;
  at: number;
}

/** A batcher whose runs wait for the test; `runs` yields them in order. */
function controlled(options: { maxBatchSize: number; maxWaitMs: number; maxQueueSize?: number }) {
  const runs = new Arrivals<Run>();
  const sizes: number[] = [];
  const depths: number[] = [];
  const waits: number[] = [];
  const batcher = new Batcher<number, string>(
    (items) => {
      const result = deferred<string[]>();
      runs.push({ items, result, at: performance.now() });
      return result.promise;
    },
    options,
    { onBatch: (n) => sizes.push(n), onDepth: (d) => depths.push(d), onDequeue: (s) => waits.push(s) },
  );
  const answer = (run: Run) => run.result.resolve(run.items.map((i) => `r${i}`));
  return { batcher, runs, sizes, depths, waits, answer };
}

const code = async (promise: Promise<unknown>): Promise<string> => {
  try {
    await promise;
  } catch (err) {
    expect(err).to.be.instanceOf(ServingError);
    return (err as ServingError).code;
  }
  throw new Error("expected a rejection");
};

describe("Batcher", function () {
  this.timeout(10_000);

  it("rejects submit before start with ERR_NOT_SERVING", async () => {
    const { batcher } = controlled({ maxBatchSize: 2, maxWaitMs: 1 });
    expect(batcher.serving).to.equal(false);
    expect(await code(batcher.submit(1))).to.equal("ERR_NOT_SERVING");
  });

  it("closes a batch at maxBatchSize at once, and runs one batch at a time while the next fills", async () => {
    const { batcher, runs, sizes, answer } = controlled({ maxBatchSize: 4, maxWaitMs: 60_000 });
    batcher.start();
    const results = Array.from({ length: 10 }, (_, i) => batcher.submit(i));
    const first = await runs.next();
    expect(first.items).to.deep.equal([0, 1, 2, 3]);
    // The second batch is full but waits for the first to finish.
    expect(batcher.queueDepth).to.equal(6);
    expect(runs.all).to.have.length(1);
    answer(first);
    const second = await runs.next();
    expect(second.items).to.deep.equal([4, 5, 6, 7]);
    answer(second);
    // Two left, deadline one minute away: stop() flushes them at once.
    const stopped = batcher.stop();
    const third = await runs.next();
    expect(third.items).to.deep.equal([8, 9]);
    answer(third);
    await stopped;
    expect(await Promise.all(results)).to.deep.equal(results.map((_, i) => `r${i}`));
    expect(sizes).to.deep.equal([4, 4, 2]);
  });

  it("waits maxWaitMs for company before sending a lone item", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 8, maxWaitMs: 20 });
    batcher.start();
    const submittedAt = performance.now();
    const result = batcher.submit(7);
    const run = await runs.next();
    expect(run.items).to.deep.equal([7]);
    // Timers never fire early; 1 ms is the slop the batcher allows for their granularity.
    expect(run.at - submittedAt).to.be.at.least(19);
    answer(run);
    expect(await result).to.equal("r7");
    await batcher.stop();
  });

  it("after a run, sends the next batch at once when its wait has already elapsed", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 8, maxWaitMs: 0 });
    batcher.start();
    const a = batcher.submit(1);
    const first = await runs.next();
    const b = batcher.submit(2); // queued while the run is busy; its wait (0 ms) is over
    expect(runs.all).to.have.length(1);
    answer(first);
    // No timer involved: the next run starts within the same turn of the event loop.
    await new Promise((resolve) => setImmediate(resolve));
    expect(runs.all).to.have.length(2);
    const second = await runs.next();
    expect(second.items).to.deep.equal([2]);
    answer(second);
    expect(await Promise.all([a, b])).to.deep.equal(["r1", "r2"]);
    await batcher.stop();
  });

  it("fails only the batch whose run rejects, and keeps serving", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 2, maxWaitMs: 60_000 });
    batcher.start();
    const doomed = [batcher.submit(1), batcher.submit(2)];
    const fine = [batcher.submit(3), batcher.submit(4)];
    const first = await runs.next();
    first.result.reject(Object.assign(new Error("boom"), { code: "ERR_INFERENCE" }));
    expect(await code(doomed[0]!)).to.equal("ERR_INFERENCE");
    expect(await code(doomed[1]!)).to.equal("ERR_INFERENCE");
    answer(await runs.next());
    expect(await Promise.all(fine)).to.deep.equal(["r3", "r4"]);
    await batcher.stop();
  });

  it("fails a batch whose run returns the wrong number of results, or throws synchronously", async () => {
    let calls = 0;
    const batcher = new Batcher<number, number>(
      (items) => {
        calls += 1;
        if (calls === 1) return Promise.resolve([1]);
        if (calls === 2) throw new Error("sync throw");
        return Promise.resolve(items);
      },
      { maxBatchSize: 2, maxWaitMs: 60_000 },
    );
    batcher.start();
    const wrong = [batcher.submit(1), batcher.submit(2)];
    const thrown = [batcher.submit(3), batcher.submit(4)];
    const ok = [batcher.submit(5), batcher.submit(6)];
    expect(await code(wrong[0]!)).to.equal("ERR_INTERNAL");
    expect(await code(wrong[1]!)).to.equal("ERR_INTERNAL");
    expect(await code(thrown[0]!)).to.equal("ERR_INTERNAL");
    expect(await Promise.all(ok)).to.deep.equal([5, 6]);
    expect(calls).to.equal(3);
    await batcher.stop();
  });

  it("refuses with ERR_QUEUE_FULL beyond maxQueueSize (the batch in flight not counted)", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 1, maxWaitMs: 0, maxQueueSize: 2 });
    batcher.start();
    const inFlight = batcher.submit(1);
    const first = await runs.next();
    const queued = [batcher.submit(2), batcher.submit(3)];
    expect(batcher.queueDepth).to.equal(2);
    expect(await code(batcher.submit(4))).to.equal("ERR_QUEUE_FULL");
    answer(first);
    answer(await runs.next());
    answer(await runs.next());
    expect(await Promise.all([inFlight, ...queued])).to.deep.equal(["r1", "r2", "r3"]);
    await batcher.stop();
  });

  it("drops an item aborted while queued (ERR_CANCELLED); the run never sees it", async () => {
    const { batcher, runs, depths, answer } = controlled({ maxBatchSize: 1, maxWaitMs: 0 });
    batcher.start();
    const first = batcher.submit(1);
    const run1 = await runs.next();
    const controller = new AbortController();
    const gone = batcher.submit(2, controller.signal);
    const kept = batcher.submit(3);
    expect(batcher.queueDepth).to.equal(2);
    controller.abort();
    expect(await code(gone)).to.equal("ERR_CANCELLED");
    expect(batcher.queueDepth).to.equal(1);
    answer(run1);
    const run2 = await runs.next();
    expect(run2.items).to.deep.equal([3]);
    answer(run2);
    expect(await Promise.all([first, kept])).to.deep.equal(["r1", "r3"]);
    expect(depths).to.include(1);
    await batcher.stop();
    expect(runs.all.flatMap((r) => r.items)).to.deep.equal([1, 3]);
  });

  it("ignores an abort once the item's batch is running, and refuses an already-aborted signal", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 1, maxWaitMs: 0 });
    batcher.start();
    const controller = new AbortController();
    const result = batcher.submit(1, controller.signal);
    const run = await runs.next();
    controller.abort();
    answer(run);
    expect(await result).to.equal("r1");
    expect(await code(batcher.submit(2, AbortSignal.abort()))).to.equal("ERR_CANCELLED");
    await batcher.stop();
  });

  it("stop(): refuses new work, drains queued and in-flight work, then resolves", async () => {
    const { batcher, runs, answer } = controlled({ maxBatchSize: 2, maxWaitMs: 60_000 });
    batcher.start();
    const results = [1, 2, 3].map((i) => batcher.submit(i));
    const first = await runs.next();
    let stopped = false;
    const stopping = batcher.stop().then(() => (stopped = true));
    expect(batcher.serving).to.equal(false);
    expect(await code(batcher.submit(9))).to.equal("ERR_NOT_SERVING");
    answer(first);
    const second = await runs.next();
    expect(second.items).to.deep.equal([3]);
    expect(stopped).to.equal(false);
    answer(second);
    await stopping;
    expect(await Promise.all(results)).to.deep.equal(["r1", "r2", "r3"]);
    // It can serve again after a restart.
    batcher.start();
    const again = batcher.submit(4);
    const stoppingAgain = batcher.stop(); // flushes the lone item without its minute-long wait
    answer(await runs.next());
    expect(await again).to.equal("r4");
    await stoppingAgain;
  });

  it("reports queue wait per item and validates its options", async () => {
    const { batcher, runs, waits, answer } = controlled({ maxBatchSize: 2, maxWaitMs: 60_000 });
    batcher.start();
    const results = [batcher.submit(1), batcher.submit(2)];
    answer(await runs.next());
    await Promise.all(results);
    expect(waits).to.have.length(2);
    for (const w of waits) expect(w).to.be.at.least(0);
    await batcher.stop();
    expect(() => new Batcher(async () => [], { maxBatchSize: 0, maxWaitMs: 1 })).to.throw(ServingError);
    expect(() => new Batcher(async () => [], { maxBatchSize: 1, maxWaitMs: -1 })).to.throw(ServingError);
  });
});
