/** The Redis limiter against a real redis-server (started here on a free loopback port). */
import { expect } from "chai";
import { Redis } from "ioredis";
import { createRecsysApp } from "../../src/http/index.js";
import { RedisRateLimiter } from "../../src/ratelimit/index.js";
import { listen } from "../helpers/http.js";
import { startRedis, type RedisProcess } from "../helpers/redis.js";

describe("RedisRateLimiter (real redis-server)", function () {
  this.timeout(20_000);
  let server: RedisProcess;
  let client: Redis;
  let prefix: string;
  let testNumber = 0;

  before(async () => {
    server = await startRedis();
    client = new Redis(server.url);
  });
  after(async () => {
    await client?.quit();
    await server?.stop();
  });
  beforeEach(() => {
    testNumber += 1;
    prefix = `test${testNumber}:`;
  });

  it("allows a burst of `capacity` per key, then denies, with Retry-After from Redis's answer", async () => {
    const limiter = new RedisRateLimiter(client, { capacity: 3, refillPerSecond: 0.1, keyPrefix: prefix });
    const answers = [];
    for (let i = 0; i < 4; i += 1) answers.push(await limiter.allow("alice"));
    expect(answers).to.deep.equal([true, true, true, false]);
    expect(await limiter.allow("bob")).to.equal(true);
    expect(limiter.retryAfterSeconds("alice")).to.equal(10); // one token at 0.1/s
    expect(limiter.retryAfterSeconds("bob")).to.equal(1); // not denied: the minimum
  });

  it("two limiters sharing one Redis share the budget (replicas behind a load balancer)", async () => {
    const replicaA = new RedisRateLimiter(client, { capacity: 4, refillPerSecond: 0.01, keyPrefix: prefix });
    const replicaB = new RedisRateLimiter(server.url, { capacity: 4, refillPerSecond: 0.01, keyPrefix: prefix });
    try {
      const answers = [];
      for (const limiter of [replicaA, replicaB, replicaA, replicaB, replicaA, replicaB]) answers.push(await limiter.allow("shared"));
      expect(answers).to.deep.equal([true, true, true, true, false, false]);
    } finally {
      await replicaB.close();
    }
    expect(client.status).to.equal("ready"); // close() leaves a caller's client alone
  });

  it("is atomic under concurrency: exactly `capacity` of many simultaneous calls pass", async () => {
    const limiter = new RedisRateLimiter(client, { capacity: 5, refillPerSecond: 0.01, keyPrefix: prefix });
    const answers = await Promise.all(Array.from({ length: 30 }, () => limiter.allow("burst")));
    expect(answers.filter(Boolean)).to.have.length(5);
  });

  it("refills on Redis's clock", async () => {
    const limiter = new RedisRateLimiter(client, { capacity: 2, refillPerSecond: 0.01, keyPrefix: prefix });
    expect([await limiter.allow("k"), await limiter.allow("k"), await limiter.allow("k")]).to.deep.equal([true, true, false]);
    // Move the bucket's last update 150 s (1.5 tokens) into the past instead of sleeping.
    const ts = Number(await client.hget(`${prefix}k`, "ts"));
    await client.hset(`${prefix}k`, "ts", String(ts - 150_000));
    expect(await limiter.allow("k")).to.equal(true);
    expect(await limiter.allow("k")).to.equal(false);
  });

  it("keeps state under its prefix with a TTL, so idle buckets vanish", async () => {
    const limiter = new RedisRateLimiter(client, { capacity: 10, refillPerSecond: 5, keyPrefix: prefix });
    await limiter.allow("ttl-key");
    const ttl = await client.pttl(`${prefix}ttl-key`);
    // Full again after 10 / 5 = 2 s; kept a little longer, never forever.
    expect(ttl).to.be.above(0);
    expect(ttl).to.be.at.most(3000);
    expect(await client.exists("ttl-key")).to.equal(0);
  });

  it("rejects when Redis is unreachable (the HTTP layer then fails open)", async () => {
    const dead = await startRedis();
    const url = dead.url;
    await dead.stop();
    const clientErrors: Error[] = [];
    const limiter = new RedisRateLimiter(url, {
      capacity: 1,
      refillPerSecond: 1,
      keyPrefix: prefix,
      onClientError: (err) => clientErrors.push(err),
    });
    try {
      let error: unknown;
      try {
        await limiter.allow("k");
      } catch (err) {
        error = err;
      }
      expect(error).to.be.instanceOf(Error);
      expect(clientErrors.length).to.be.above(0);
    } finally {
      await limiter.close().catch(() => {});
    }
  });

  it("serves as an app's limiter: 429 with Retry-After once the shared budget is spent", async () => {
    const limiter = new RedisRateLimiter(client, { capacity: 2, refillPerSecond: 0.5, keyPrefix: prefix });
    const running = await listen(createRecsysApp({ recommend: () => ({ items: [1], fallback: false }) }, { rateLimiter: limiter }));
    try {
      const headers = { "X-API-Key": "tenant-1" };
      const statuses = [];
      for (let i = 0; i < 3; i += 1) statuses.push((await fetch(`${running.base}/recommend/1`, { headers })).status);
      expect(statuses).to.deep.equal([200, 200, 429]);
      const denied = await fetch(`${running.base}/recommend/1`, { headers });
      expect(denied.headers.get("retry-after")).to.equal("2");
      expect(await client.exists(`${prefix}tenant-1`)).to.equal(1);
    } finally {
      await running.close();
    }
  });
});
