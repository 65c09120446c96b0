/** The server's environment: defaults, and an error naming each bad variable. */
import { expect } from "chai";

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { readEngineEnv, readRecommenderEnv, readServerConfig } from "../../src/server/config.js";
import { engineOptions } from "../../src/server/fromEnv.js";
import { repoRoot } from "../helpers/fixtures.js";

describe("readServerConfig", () => {
  it("has the documented defaults", () => {
    const config = readServerConfig({});
    expect(config).to.deep.include({
      host: "0.0.0.0",
      port: 8000,
      recsysPort: 8001,
      maxBatchSize: 8,
      maxWaitMs: 5,
      maxQueueSize: 1024,
      rateLimitPerSecond: undefined,
      redisUrl: undefined,
      logLevel: "info",
      shutdownTimeoutMs: 30000,
      trustProxy: false,
      maxActiveStreams: undefined,
      headersTimeoutMs: 10000,
      requestTimeoutMs: 30000,
      keepAliveTimeoutMs: 65000,
    });
    expect(config.engine).to.deep.equal({
      checkpoint: undefined, device: "cpu", threads: undefined, runtime: "auto", kernels: "auto", torchscriptCompute: "auto", torchscriptDequantize: "auto", torchscriptOptimize: "auto", kvBudgetMb: undefined, stepTokens: undefined, prefixCache: "on", mmap: "on",
      loadCheckCache: undefined, layoutCache: undefined, loadCheck: "cached", cpuVendor: "auto", bf16Weights: "packed",
    });
    expect(config.recommender).to.deep.equal({ checkpoint: undefined, device: "cpu", latencyBudgetMs: 100 });
  });

  it("reads the stream limit, the KV budget and the server timeouts", () => {
    const config = readServerConfig({
      MAX_ACTIVE_STREAMS: "12", SERVICE_KV_BUDGET_MB: "64", HEADERS_TIMEOUT_MS: "2000",
      REQUEST_TIMEOUT_MS: "5000", KEEP_ALIVE_TIMEOUT_MS: "7000",
    });
    expect(config).to.deep.include({ maxActiveStreams: 12, headersTimeoutMs: 2000, requestTimeoutMs: 5000, keepAliveTimeoutMs: 7000 });
    expect(config.engine.kvBudgetMb).to.equal(64);
    expect(() => readServerConfig({ MAX_ACTIVE_STREAMS: "0" })).to.throw(/MAX_ACTIVE_STREAMS/);
    expect(() => readServerConfig({ HEADERS_TIMEOUT_MS: "9000", REQUEST_TIMEOUT_MS: "5000" })).to.throw(/HEADERS_TIMEOUT_MS/);
  });

  it("reads the bounds of the responses store: MiB and seconds, 0 MiB keeping none", () => {
    expect(readServerConfig({}).responseStore).to.deep.equal({ maxBytes: 64 * 1024 * 1024, ttlMs: 3600 * 1000 });
    expect(readServerConfig({ RESPONSES_STORE_MB: "0.5", RESPONSES_STORE_TTL_S: "90" }).responseStore).to.deep.equal({ maxBytes: 512 * 1024, ttlMs: 90000 });
    expect(readServerConfig({ RESPONSES_STORE_MB: "0" }).responseStore.maxBytes).to.equal(0);
    expect(() => readServerConfig({ RESPONSES_STORE_MB: "-1" })).to.throw(/RESPONSES_STORE_MB/);
    expect(() => readServerConfig({ RESPONSES_STORE_TTL_S: "0" })).to.throw(/RESPONSES_STORE_TTL_S/);
  });

  it("reads every variable", () => {
    const config = readServerConfig({
      HOST: "127.0.0.1", PORT: "0", RECSYS_PORT: "9001", SERVICE_CKPT: "a.pt", SERVICE_DEVICE: "cuda:1",
      SERVICE_THREADS: "3", SERVICE_RUNTIME: "torchscript", SERVICE_KERNELS: "avx2", SERVICE_TORCHSCRIPT_COMPUTE: "float32", SERVICE_TORCHSCRIPT_DEQUANTIZE: "once", SERVICE_TORCHSCRIPT_OPTIMIZE: "off", SERVICE_KV_BUDGET_MB: "512", SERVICE_STEP_TOKENS: "0", SERVICE_PREFIX_CACHE: "off", SERVICE_MMAP: "off", SERVICE_LOAD_CHECK_CACHE: "/var/cache/checks", SERVICE_LAYOUT_CACHE: "/var/cache/layouts", SERVICE_LOAD_CHECK: "always", SERVICE_CPU_VENDOR: "intel", SERVICE_BF16_WEIGHTS: "in-place", RECSYS_CKPT: "b.pt", RECSYS_LATENCY_BUDGET_MS: "50", MAX_BATCH_SIZE: "32",
      MAX_WAIT_MS: "2.5", MAX_QUEUE_SIZE: "10", RATE_LIMIT_PER_SECOND: "5", RATE_LIMIT_BURST: "20",
      REDIS_URL: "redis://127.0.0.1:6379", LOG_LEVEL: "debug", SHUTDOWN_TIMEOUT_MS: "1000", TRUST_PROXY: "1",
    });
    expect(config).to.deep.include({
      host: "127.0.0.1", port: 0, recsysPort: 9001, maxBatchSize: 32, maxWaitMs: 2.5, maxQueueSize: 10,
      rateLimitPerSecond: 5, rateLimitBurst: 20, redisUrl: "redis://127.0.0.1:6379", logLevel: "debug",
      shutdownTimeoutMs: 1000, trustProxy: 1,
    });
    expect(config.engine).to.deep.equal({
      checkpoint: "a.pt", device: "cuda:1", threads: 3, runtime: "torchscript", kernels: "avx2", torchscriptCompute: "float32", torchscriptDequantize: "once", torchscriptOptimize: "off", kvBudgetMb: 512, stepTokens: 0, prefixCache: "off", mmap: "off",
      loadCheckCache: "/var/cache/checks", layoutCache: "/var/cache/layouts", loadCheck: "always", cpuVendor: "intel", bf16Weights: "in-place",
    });
    expect(config.recommender).to.deep.equal({ checkpoint: "b.pt", device: "cpu", latencyBudgetMs: 50 });
    expect(readServerConfig({ TRUST_PROXY: "true" }).trustProxy).to.equal(true);
    expect(readServerConfig({ TRUST_PROXY: "loopback, 10.0.0.0/8" }).trustProxy).to.equal("loopback, 10.0.0.0/8");
  });

  it("remembers load-time check verdicts in the user's cache directory unless told where, or off", () => {
    expect(readEngineEnv({ HOME: "/home/u" }).loadCheckCache).to.equal("/home/u/.cache/torchserve-node/load-checks");
    expect(readEngineEnv({ HOME: "/home/u", XDG_CACHE_HOME: "/c" }).loadCheckCache).to.equal("/c/torchserve-node/load-checks");
    expect(readEngineEnv({ HOME: "/home/u", SERVICE_LOAD_CHECK_CACHE: "/srv/checks" }).loadCheckCache).to.equal("/srv/checks");
    expect(readEngineEnv({ HOME: "/home/u", SERVICE_LOAD_CHECK_CACHE: "off" }).loadCheckCache).to.equal(undefined);
  });

  it("keeps layout files in the user's cache directory unless told where, or off", () => {
    expect(readEngineEnv({ HOME: "/home/u" }).layoutCache).to.equal("/home/u/.cache/torchserve-node/layouts");
    expect(readEngineEnv({ HOME: "/home/u", XDG_CACHE_HOME: "/c" }).layoutCache).to.equal("/c/torchserve-node/layouts");
    expect(readEngineEnv({ HOME: "/home/u", SERVICE_LAYOUT_CACHE: "/srv/layouts" }).layoutCache).to.equal("/srv/layouts");
    expect(readEngineEnv({ HOME: "/home/u", SERVICE_LAYOUT_CACHE: "off" }).layoutCache).to.equal(undefined);
    expect(engineOptions(readEngineEnv({ SERVICE_LAYOUT_CACHE: "/srv/layouts" })).layoutCache).to.equal("/srv/layouts");
    expect(engineOptions(readEngineEnv({ SERVICE_LAYOUT_CACHE: "off" }))).to.not.have.property("layoutCache");
  });

  it("names the variable that is wrong", () => {
    const bad: Record<string, string> = {
      PORT: "http", RECSYS_PORT: "70000", MAX_BATCH_SIZE: "0", MAX_WAIT_MS: "-1", MAX_QUEUE_SIZE: "1.5",
      SERVICE_THREADS: "many", SERVICE_RUNTIME: "fast", SERVICE_KERNELS: "sse", SERVICE_TORCHSCRIPT_COMPUTE: "int8", SERVICE_TORCHSCRIPT_DEQUANTIZE: "never", SERVICE_TORCHSCRIPT_OPTIMIZE: "yes", SERVICE_KV_BUDGET_MB: "0", SERVICE_STEP_TOKENS: "-1", SERVICE_PREFIX_CACHE: "no", SERVICE_MMAP: "yes", SERVICE_LOAD_CHECK: "sometimes", SERVICE_CPU_VENDOR: "arm", SERVICE_BF16_WEIGHTS: "copy", RATE_LIMIT_PER_SECOND: "0", RECSYS_LATENCY_BUDGET_MS: "fast", SHUTDOWN_TIMEOUT_MS: "soon",
    };
    for (const [name, value] of Object.entries(bad)) {
      expect(() => readServerConfig({ [name]: value }), name).to.throw(name).with.property("code", "ERR_CONFIG");
    }
    expect(() => readServerConfig({ RATE_LIMIT_BURST: "5" })).to.throw(/RATE_LIMIT_PER_SECOND/);
  });

  it("the factories read the same variables the same way", () => {
    const env = { SERVICE_CKPT: "a.pt", SERVICE_RUNTIME: "native", SERVICE_KERNELS: "baseline", SERVICE_THREADS: "2", RECSYS_CKPT: "b.pt", RECSYS_LATENCY_BUDGET_MS: "20" };
    const server = readServerConfig(env);
    expect(readEngineEnv(env)).to.deep.equal({
      checkpoint: "a.pt", device: "cpu", threads: 2, runtime: "native", kernels: "baseline", torchscriptCompute: "auto", torchscriptDequantize: "auto", torchscriptOptimize: "auto", kvBudgetMb: undefined, stepTokens: undefined, prefixCache: "on", mmap: "on",
      loadCheckCache: undefined, layoutCache: undefined, loadCheck: "cached", cpuVendor: "auto", bf16Weights: "packed",
    });
    expect(server.engine).to.deep.equal(readEngineEnv(env));
    expect(readRecommenderEnv(env)).to.deep.equal({ checkpoint: "b.pt", device: "cpu", latencyBudgetMs: 20 });
    expect(server.recommender).to.deep.equal(readRecommenderEnv(env));
  });

  it("API keys from API_KEYS and API_KEYS_FILE together; an unreadable or empty file is a startup error naming it", () => {
    expect(readServerConfig({}).apiKeys).to.deep.equal([]);
    expect(readServerConfig({ API_KEYS: " a, b,,a " }).apiKeys).to.deep.equal(["a", "b"]);
    const dir = mkdtempSync(join(tmpdir(), "tsn-keys-"));
    try {
      const file = join(dir, "keys");
      writeFileSync(file, "# team keys\nc\n\n  d  \n");
      expect(readServerConfig({ API_KEYS: "a", API_KEYS_FILE: file }).apiKeys).to.deep.equal(["a", "c", "d"]);
      writeFileSync(file, "# none yet\n");
      expect(() => readServerConfig({ API_KEYS_FILE: file })).to.throw(/API_KEYS_FILE/).with.property("code", "ERR_CONFIG");
      expect(() => readServerConfig({ API_KEYS_FILE: join(dir, "missing") })).to.throw(/API_KEYS_FILE/).with.property("code", "ERR_CONFIG");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    expect(readServerConfig({ SERVICE_MODEL_NAME: "my-model" }).modelName).to.equal("my-model");
  });

  it("every variable the reader reads is in the README's configuration table", () => {
    const source = readFileSync(join(repoRoot, "src", "server", "config.ts"), "utf8");
    const read = [...source.matchAll(/\((?:env, )"([A-Z][A-Z0-9_]+)"/g)].map((m) => m[1]!);
    expect(read).to.include.members(["SERVICE_CKPT", "SERVICE_RUNTIME", "SERVICE_KERNELS", "PORT"]);
    const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
    const table = readme.slice(readme.indexOf("## Configuration"), readme.indexOf("\n## ", readme.indexOf("## Configuration") + 5));
    for (const name of new Set(read)) expect(table, name).to.include(`\`${name}\``);
  });
});
