/**
 * The published package works as a dependency, tried as a new user would: `npm pack`, then
 * `npm install` of the tarball into a fresh project, offline, which builds the addon through
 * the install script; then an ESM and a CommonJS consumer use it, and its bin serves.
 *
 * Offline means from the npm cache `npm ci` filled. That cache holds the dependencies'
 * tarballs but not the registry's version lists, so the fresh project gets a lockfile pinning
 * torchserve-node's dependencies at this checkout's locked versions (what a consumer with a
 * lockfile has); with no lockfile npm would have to ask the registry which versions exist.
 * The addon build at install is the one slow step (the cmake-js build, about a minute and a
 * half on 2 cores): this file builds it once and every case uses that install.
 */
import { expect } from "chai";
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { repoRoot } from "../helpers/fixtures.js";
import { ServerProcess } from "../e2e/serverProcess.js";
import { TorchEngine } from "../../src/index.js";

interface PackResult {
  filename: string;
  integrity: string;
  files: { path: string }[];
}

interface LockEntry {
  dev?: boolean;
  [field: string]: unknown;
}

const ownPackage = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as {
  name: string;
  version: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  bin: Record<string, string>;
  engines: Record<string, string>;
};

/**
 * npm's own settings come from ~/.npmrc and the defaults, not from the `npm test` run this
 * executes under (npm_* variables); the npm cache is kept, it is where the packages are.
 * A proxy that refuses every connection makes any attempt at the network fail loudly.
 */
function npmEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(name) || /^npm_config_cache$/i.test(name)) env[name] = value;
  }
  const refused = "http://127.0.0.1:9";
  return { ...env, HTTP_PROXY: refused, HTTPS_PROXY: refused, npm_config_proxy: refused, npm_config_https_proxy: refused, ...extra };
}

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = npmEnv()): SpawnSyncReturns<string> {
  return spawnSync(command, args, { cwd, env, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
}

function ok(result: SpawnSyncReturns<string>, what: string): string {
  expect(result.status, `${what} failed (${result.status ?? result.signal}):\n${result.stdout}\n${result.stderr}`).to.equal(0);
  return result.stdout;
}

/** The consumer's lockfile: the tarball, and this checkout's locked runtime dependencies. */
function consumerLock(pack: PackResult, tarballSpec: string): object {
  const lock = JSON.parse(readFileSync(join(repoRoot, "package-lock.json"), "utf8")) as { packages: Record<string, LockEntry> };
  const packages: Record<string, object> = {
    "": { name: "consumer", version: "1.0.0", dependencies: { [ownPackage.name]: tarballSpec } },
    [`node_modules/${ownPackage.name}`]: {
      version: ownPackage.version,
      resolved: tarballSpec,
      integrity: pack.integrity,
      hasInstallScript: true,
      dependencies: ownPackage.dependencies,
      bin: ownPackage.bin,
      engines: ownPackage.engines,
    },
  };
  for (const [path, entry] of Object.entries(lock.packages)) {
    if (path !== "" && !entry.dev) packages[path] = entry;
  }
  return { name: "consumer", version: "1.0.0", lockfileVersion: 3, requires: true, packages };
}

const esmConsumer = `
import { createApp, TorchEngine } from "torchserve-node";
import { fileURLToPath } from "node:url";

const checkpoint = fileURLToPath(import.meta.resolve("torchserve-node/models/brown-gpt.pt"));
const engine = await TorchEngine.load(checkpoint, { device: "cpu" });
// top_k 1: the most likely token at every step, through the engine and through HTTP alike.
const request = { prompt: "The jury said that the city", maxNewTokens: 24, temperature: 1, topK: 1 };
const [direct] = await engine.generateBatch([request]);

const app = createApp(engine);
await app.start();
const server = app.listen(0, "127.0.0.1");
await new Promise((resolve) => server.once("listening", resolve));
const response = await fetch(\`http://127.0.0.1:\${server.address().port}/generate\`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ prompt: request.prompt, max_new_tokens: request.maxNewTokens, temperature: 1, top_k: 1 }),
});
const body = await response.json();
server.closeAllConnections();
await new Promise((resolve) => server.close(resolve));
await app.stop();
await engine.dispose();
console.log(JSON.stringify({ checkpoint, direct, status: response.status, http: body.text }));
`;

const cjsConsumer = `
const tsn = require("torchserve-node");
console.log(JSON.stringify({ createApp: typeof tsn.createApp, TorchEngine: typeof tsn.TorchEngine }));
`;

describe("installed as a dependency (npm pack, then npm install --offline in a fresh project)", function () {
  // The install compiles the addon: minutes, not the suite's usual seconds per case.
  this.timeout(10 * 60_000);
  let work: string;
  let consumer: string;
  let installed: string;
  let pack: PackResult;

  before(function () {
    work = mkdtempSync(join(tmpdir(), "tsn-package-"));
    consumer = join(work, "consumer");
    installed = join(consumer, "node_modules", ownPackage.name);
    mkdirSync(consumer);

    let started = Date.now();
    const stdout = ok(run("npm", ["pack", "--json", "--pack-destination", work], repoRoot), "npm pack");
    [pack] = JSON.parse(stdout.slice(stdout.indexOf("["))) as [PackResult];
    const packSeconds = (Date.now() - started) / 1000;

    const tarballSpec = `file:../${pack.filename}`;
    writeFileSync(join(consumer, "package.json"), JSON.stringify({
      name: "consumer", version: "1.0.0", private: true, type: "module",
      dependencies: { [ownPackage.name]: tarballSpec },
      // npm 12 runs a dependency's install script only when the project allows it.
      allowScripts: { [ownPackage.name]: true },
    }, null, 2));
    writeFileSync(join(consumer, "package-lock.json"), JSON.stringify(consumerLock(pack, tarballSpec), null, 2));

    started = Date.now();
    ok(run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--foreground-scripts"], consumer), "npm install --offline");
    console.log(`      npm pack: ${packSeconds.toFixed(1)} s; npm install --offline with the addon build: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });

  after(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("the tarball holds what a consumer needs and none of the test suite", () => {
    const paths = pack.files.map((file) => file.path);
    for (const needed of [
      "package.json", "README.md", "CMakeLists.txt", "binding.gyp", "scripts/build-native.mjs", "scripts/torch-paths.mjs",
      "dist/src/index.js", "dist/src/index.d.ts", "dist/src/server.js", "native/binding/addon.cc",
      "models/brown-gpt.pt", "models/brown-gpt.pt.sha256", "models/recsys-demo.pt", "models/recsys-demo.pt.sha256",
      "src/http/playground/assets/text.html",
    ]) {
      expect(paths, needed).to.include(needed);
    }
    const unwanted = paths.filter((path) => /^(test|dist\/test|dist\/scripts|scripts\/(bench|model|recsys)|\.cache|build|build-gyp|node_modules)\//.test(path) || /\.ts$/.test(path) && !/\.d\.ts$/.test(path));
    expect(unwanted).to.deep.equal([]);
  });

  it("installs offline, building the addon at install without the devDependencies", () => {
    expect(existsSync(join(installed, "build", "Release", "torchserve.node")), "the install script built no addon").to.equal(true);
    // Hoisted beside it, not under it: the layout that broke the install script.
    expect(existsSync(join(consumer, "node_modules", "cmake-js", "package.json"))).to.equal(true);
    expect(existsSync(join(installed, "node_modules"))).to.equal(false);
    for (const dev of Object.keys(ownPackage.devDependencies)) {
      expect(existsSync(join(consumer, "node_modules", dev)), `devDependency ${dev} was installed`).to.equal(false);
    }
  });

  it("an ES module consumer imports createApp and TorchEngine and generates from the demo model", async () => {
    writeFileSync(join(consumer, "consumer.mjs"), esmConsumer);
    const out = JSON.parse(ok(run(process.execPath, ["consumer.mjs"], consumer, process.env), "the ESM consumer")) as {
      checkpoint: string; direct: string; status: number; http: string;
    };
    expect(out.checkpoint).to.equal(join(installed, "models", "brown-gpt.pt"));
    expect(out.status).to.equal(200);
    expect(out.direct).to.be.a("string").and.not.equal("");
    expect(out.http).to.equal(out.direct);
    // The installed package serves the same model as this checkout: one machine, top-1 decoding.
    const engine = await TorchEngine.load(join(repoRoot, "models", "brown-gpt.pt"), { device: "cpu" });
    try {
      const [here] = await engine.generateBatch([{ prompt: "The jury said that the city", maxNewTokens: 24, temperature: 1, topK: 1 }]);
      expect(out.direct).to.equal(here);
    } finally {
      await engine.dispose();
    }
  });

  it("a CommonJS consumer can require() it (Node >= 20.19 loads ES modules through require)", () => {
    const out = JSON.parse(ok(run(process.execPath, ["-e", cjsConsumer], consumer, process.env), "the CommonJS consumer")) as Record<string, string>;
    expect(out).to.deep.equal({ createApp: "function", TorchEngine: "function" });
  });

  it("the bin serves the demo models from the package, whatever the working directory, and drains on SIGTERM", async () => {
    const bin = join(consumer, "node_modules", ".bin", "torchserve-node");
    expect(existsSync(bin), "no node_modules/.bin/torchserve-node").to.equal(true);
    const elsewhere = join(work, "elsewhere");
    mkdirSync(elsewhere);
    const server = new ServerProcess({}, { entry: bin, cwd: elsewhere });
    try {
      const { text, recsys } = await server.ready();
      for (const base of [text, recsys]) {
        const response = await fetch(`${base}/health`);
        expect(response.status).to.equal(200);
        expect(await response.json()).to.deep.equal({ status: "ok" });
      }
      const checkpoints = server.log.map((line) => line["checkpoint"]).filter((path) => typeof path === "string");
      expect(checkpoints).to.include(join(installed, "models", "brown-gpt.pt"));
      expect(checkpoints).to.include(join(installed, "models", "recsys-demo.pt"));
    } finally {
      const exit = await server.stop();
      expect(exit, server.transcript()).to.deep.equal({ code: 0, signal: null });
    }
    expect(server.log.some((line) => line.msg === "stopped")).to.equal(true);
  });

  describe("a machine that cannot build the addon is told what to install", () => {
    /** A second, unbuilt copy of the installed package beside the first, so its build starts from nothing. */
    function freshCopy(name: string): string {
      const copy = join(consumer, "node_modules", name);
      cpSync(installed, copy, { recursive: true, filter: (source) => !source.startsWith(join(installed, "build")) });
      return copy;
    }

    it("no cmake, make or compiler: the missing tools and the apt-get line", () => {
      const copy = freshCopy("torchserve-node-no-tools");
      // A PATH holding node alone.
      const bin = join(work, "only-node");
      mkdirSync(bin);
      symlinkSync(process.execPath, join(bin, "node"));
      const result = run(process.execPath, ["scripts/build-native.mjs"], copy, { ...process.env, PATH: bin });
      expect(result.status).to.equal(1);
      expect(result.stderr).to.match(/Missing: make, cmake, a C\+\+ compiler/);
      expect(result.stderr).to.include("sudo apt-get install");
      expect(result.stderr).to.include("npm rebuild torchserve-node");
      expect(result.stderr).not.to.include("scripts/setup.sh");
    });

    it("Ninja stands in for make (cmake-js drives it): not named missing beside cmake and a compiler", () => {
      const copy = freshCopy("torchserve-node-ninja");
      const bin = join(work, "node-and-ninja");
      mkdirSync(bin);
      symlinkSync(process.execPath, join(bin, "node"));
      symlinkSync("/bin/sh", join(bin, "sh")); // build-native.mjs asks `sh -c "command -v TOOL"`
      writeFileSync(join(bin, "ninja"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const result = run(process.execPath, ["scripts/build-native.mjs"], copy, { ...process.env, PATH: bin });
      expect(result.status).to.equal(1);
      expect(result.stderr).to.match(/Missing: cmake, a C\+\+ compiler/);
    });

    it("no libtorch where LIBTORCH points: the numbered ways to provide one", () => {
      const copy = freshCopy("torchserve-node-no-torch");
      const result = run(process.execPath, ["scripts/build-native.mjs"], copy, { ...process.env, LIBTORCH: join(work, "no-libtorch-here") });
      expect(result.status).to.equal(1);
      const stderr = result.stderr;
      expect(stderr).to.include("libtorch-dev");
      expect(stderr).to.match(/2\. A downloaded libtorch: export LIBTORCH=/);
      expect(stderr).to.match(/3\. A Python torch/);
      expect(stderr).to.include("npm rebuild torchserve-node");
      expect(existsSync(join(copy, "build", "Release", "torchserve.node"))).to.equal(false);
    });
  });
});
