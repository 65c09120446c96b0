#!/usr/bin/env node
// Builds the addon, torchserve.node, and beside it the same without libtorch,
// torchserve-native.node: cmake-js (CMakeLists.txt) by default, node-gyp (binding.gyp) with
// --gyp. Skips the build when the sources have not changed since the last one.
//   node scripts/build-native.mjs [--force] [--gyp] [--debug] [--sanitize]
// --sanitize: ASan + UBSan, into build-asan/ (npm run test:sanitize loads it via TORCHSERVE_ADDON).
// The `install` script of package.json runs this, so `npm install` builds the addon.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

import { findTorch, TorchNotFoundError, torchFixes } from "./torch-paths.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
// Build tools are found the way Node finds any dependency: installed as a dependency, npm
// hoists them into the consumer's node_modules, not under this package's own.
const require = createRequire(import.meta.url);
const args = new Set(process.argv.slice(2));
const useGyp = args.has("--gyp");
const force = args.has("--force");
const debug = args.has("--debug");
const sanitize = args.has("--sanitize");

// Where each build system leaves the addon; src/native/binding.ts looks in the same places.
export const OUTPUTS = {
  cmake: join(root, sanitize ? "build-asan" : "build", debug ? "Debug" : "Release", "torchserve.node"),
  gyp: join(root, "build-gyp", "build", debug ? "Debug" : "Release", "torchserve.node"),
};

function sourceHash() {
  const hash = createHash("sha256");
  const files = ["CMakeLists.txt", "binding.gyp", "scripts/torch-paths.mjs"];
  const native = readdirSync(join(root, "native"), { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile());
  for (const name of native.map((entry) => join(entry.parentPath ?? entry.path, entry.name)).sort()) files.push(relative(root, name));
  for (const file of files) {
    hash.update(file);
    hash.update(readFileSync(join(root, file)));
  }
  const env = process.env;
  hash.update(JSON.stringify({ useGyp, debug, sanitize, libtorch: env.LIBTORCH ?? "", torchDir: env.Torch_DIR ?? "", python: env.TORCHSERVE_PYTHON ?? "" }));
  return hash.digest("hex");
}

function have(command) {
  return spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;
}

function fail(lines) {
  console.error(["", "torchserve-node: the native addon could not be built.", ...lines, ""].join("\n"));
  process.exit(1);
}

/** A tool's script as Node resolves it from here, or the fallback npm provides, or a clear failure. */
function resolveTool(specifier, fallback, what) {
  try {
    return require.resolve(specifier);
  } catch {
    if (fallback && existsSync(fallback)) return fallback;
    fail([`Missing: ${what}; Node could not resolve ${specifier} from ${root}.`]);
  }
}

const output = useGyp ? OUTPUTS.gyp : OUTPUTS.cmake;
const stamp = `${output}.sha256`;
const hash = sourceHash();
if (!force && existsSync(output) && existsSync(join(dirname(output), "torchserve-native.node")) && existsSync(stamp) &&
    readFileSync(stamp, "utf8").trim() === hash) {
  console.log(`torchserve-node: addon up to date (${output})`);
  process.exit(0);
}

// Installed as a dependency there is no scripts/setup.sh and no build:native script to point at.
const asDependency = root.split(sep).includes("node_modules");
const rerun = asDependency ? "npm rebuild torchserve-node" : "npm run build:native";
const aptLine = "sudo apt-get install cmake g++ make libtorch-dev libopenblas0-pthread";

// Both builds take libtorch from torch-paths.mjs: ask it once here, so a missing libtorch is
// reported the same way whichever build runs, before any build tool starts.
let torch = null;
let torchError = "";
try {
  torch = findTorch();
} catch (err) {
  if (!(err instanceof TorchNotFoundError)) throw err;
  torchError = err.message;
}

// node-gyp writes Makefiles; cmake-js drives Ninja when it is on PATH (pip's cmake and ninja
// often come together, as on the GPU host gpu-check.sh ran on), else Makefiles.
const missing = (useGyp ? ["make"] : [have("ninja") ? null : "make", "cmake"]).filter((tool) => tool && !have(tool));
if (!have("c++") && !have("g++")) missing.push("a C++ compiler (g++)");
if (missing.length > 0) {
  // Say everything that is missing at once, libtorch included, so one install fixes it all.
  fail([
    `Missing: ${missing.join(", ")}${torch ? "" : "; and libtorch was not found (LIBTORCH, Torch_DIR, a Python torch, /usr/local, /usr)"}.`,
    `Fix, on Debian/Ubuntu: ${torch ? "sudo apt-get install build-essential cmake" : aptLine}`,
    ...(torch ? [] : ["libtorch can also come from elsewhere:", ...torchFixes().slice(1)]),
    `Then run: ${rerun}`,
  ]);
}
if (!torch) fail([torchError, "Fixes, any one of:", ...torchFixes(), `Then run: ${rerun}`]);
console.log(`torchserve-node: libtorch from ${torch.source} (${torch.torchDir})`);

const jobs = String(Math.max(1, availableParallelism()));
let result;
if (useGyp) {
  // node-gyp always builds into ./build; stage a folder of links so both builds can coexist.
  const stage = join(root, "build-gyp");
  if (force) rmSync(join(stage, "build"), { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });
  for (const name of ["binding.gyp", "native", "scripts", "package.json"]) {
    if (!existsSync(join(stage, name))) symlinkSync(join(root, name), join(stage, name));
  }
  const nodeGyp = resolveTool("node-gyp/bin/node-gyp.js", process.env.npm_config_node_gyp, "node-gyp (npm install --save-dev node-gyp)");
  const gypArgs = [nodeGyp, "rebuild", `--jobs=${jobs}`];
  if (existsSync("/usr/include/node/node_api.h")) gypArgs.push("--nodedir=/usr");
  if (debug) gypArgs.push("--debug");
  result = spawnSync(process.execPath, gypArgs, { cwd: stage, stdio: "inherit" });
} else {
  const cmakeJs = resolveTool("cmake-js/bin/cmake-js", undefined, "cmake-js (a dependency of torchserve-node: reinstall it)");
  const cmakeArgs = [cmakeJs, "build", "--parallel", jobs, "--log-level", "warn"];
  if (debug) cmakeArgs.push("--debug");
  if (sanitize) cmakeArgs.push("--out", "build-asan", "--CDTORCHSERVE_SANITIZE=ON");
  result = spawnSync(process.execPath, cmakeArgs, { cwd: root, stdio: "inherit" });
}

// Both addons: torchserve.node and, beside it, the build without libtorch (CMakeLists.txt).
const nativeOutput = join(dirname(output), "torchserve-native.node");
if (result.status !== 0 || !existsSync(output) || !existsSync(nativeOutput)) {
  fail([
    "Look above for the first error. The usual causes and fixes:",
    "- libtorch not found, any one of:",
    ...torchFixes(),
    "- No compiler or cmake: sudo apt-get install build-essential cmake.",
    "- A CUDA libtorch needs the CUDA toolkit (nvcc) on PATH at build time.",
    `Then run: ${rerun}`,
  ]);
}
writeFileSync(stamp, `${hash}\n`);
console.log(`torchserve-node: built ${output}`);
