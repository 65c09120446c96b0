import { expect } from "chai";
import { ServingError } from "../../src/errors.js";
import { TokenBucketRateLimiter } from "../../src/ratelimit/index.js";

/** A clock the test moves by hand, in milliseconds. */
function manualClock() {
  let now = 1_000;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

describe("TokenBucketRateLimiter", () => {
  it("allows a burst of `capacity` per key, then denies", () => {
    const clock = manualClock();
    const limiter = new TokenBucketRateLimiter({ capacity: 3, refillPerSecond: 1, now: clock.now });
    expect([1, 2, 3, 4].map(() => limiter.allow("a"))).to.deep.equal([true, true, true, false]);
    // Another key has its own bucket.
    expect(limiter.allow("b")).to.equal(true);
  });

  it("refills at refillPerSecond, never above capacity", () => {
    const clock = manualClock();
    const limiter = new TokenBucketRateLimiter({ capacity: 2, refillPerSecond: 2, now: clock.now });
    expect([limiter.allow("k"), limiter.allow("k"), limiter.allow("k")]).to.deep.equal([true, true, false]);
    clock.advance(499); // 0.998 tokens
    expect(limiter.allow("k")).to.equal(false);
    clock.advance(1); // 1 token (the denied call took nothing)
    expect(limiter.allow("k")).to.equal(true);
    expect(limiter.allow("k")).to.equal(false);
    clock.advance(60_000); // long idle: full, but only to capacity
    expect([limiter.allow("k"), limiter.allow("k"), limiter.allow("k")]).to.deep.equal([true, true, false]);
  });

  it("tells the whole seconds until the next token, at least 1", () => {
    const clock = manualClock();
    const limiter = new TokenBucketRateLimiter({ capacity: 1, refillPerSecond: 0.25, now: clock.now });
    expect(limiter.retryAfterSeconds("unknown")).to.equal(1);
    limiter.allow("k");
    expect(limiter.allow("k")).to.equal(false);
    expect(limiter.retryAfterSeconds("k")).to.equal(4);
    clock.advance(2_500);
    expect(limiter.retryAfterSeconds("k")).to.equal(2); // 1.5 s left, rounded up
    clock.advance(1_499);
    expect(limiter.retryAfterSeconds("k")).to.equal(1);
    const fast = new TokenBucketRateLimiter({ capacity: 1, refillPerSecond: 100, now: clock.now });
    fast.allow("k");
    expect(fast.retryAfterSeconds("k")).to.equal(1); // 10 ms, but never below 1
  });

  it("remembers at most maxKeys, forgetting the least recently used", () => {
    const clock = manualClock();
    const limiter = new TokenBucketRateLimiter({ capacity: 1, refillPerSecond: 0.001, maxKeys: 2, now: clock.now });
    expect(limiter.allow("a")).to.equal(true);
    expect(limiter.allow("b")).to.equal(true);
    expect(limiter.allow("a")).to.equal(false); // "a" is now the most recently used
    expect(limiter.allow("c")).to.equal(true); // evicts "b"
    expect(limiter.size).to.equal(2);
    expect(limiter.allow("a")).to.equal(false); // still remembered: still empty
    expect(limiter.allow("b")).to.equal(true); // forgotten: a fresh bucket
    for (let i = 0; i < 1000; i += 1) limiter.allow(`key-${i}`);
    expect(limiter.size).to.equal(2);
  });

  it("rejects nonsensical options", () => {
    expect(() => new TokenBucketRateLimiter({ capacity: 0, refillPerSecond: 1 })).to.throw(ServingError);
    expect(() => new TokenBucketRateLimiter({ capacity: 1, refillPerSecond: 0 })).to.throw(ServingError);
    expect(() => new TokenBucketRateLimiter({ capacity: 1, refillPerSecond: 1, maxKeys: 0 })).to.throw(ServingError);
  });
});
