#!/usr/bin/env node
// libtorch discovery, the one both builds use: CMakeLists.txt asks `--cmake` and hands the
// folder to find_package(Torch); binding.gyp reads the include folders and flags. In order:
//   1. LIBTORCH (an unpacked libtorch) or Torch_DIR (the folder holding TorchConfig.cmake);
//   2. a Python torch: TORCHSERVE_PYTHON, python3, /usr/bin/python3, python, each asked for
//      torch.utils.cmake_prefix_path (pip and conda installs ship their CMake config);
//   3. the system: /usr/local, then /usr (Debian's libtorch-dev).
// A candidate counts only when TorchConfig.cmake, include/torch/script.h and libtorch.so are
// all there, so both builds compile and link against the same files.
//   node scripts/torch-paths.mjs --include | --defines | --ldflags | --libdir | --libs | --abi | --has-cuda | --json
//   node scripts/torch-paths.mjs --cmake   (Torch_DIR;lib dir;has CUDA;source, a CMake list)
// and node-addon-api's include folder for both builds:
//   node scripts/torch-paths.mjs --node-addon-api
// and the addons' sources for both builds (the libtorch addon's are all of native/; the one
// built without libtorch leaves out TORCH_SOURCES; VARIANT_SOURCES are compiled for each, the
// rest, shared, once for both):
//   node scripts/torch-paths.mjs --sources torch|native|shared|variant|torch-only
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, realpathSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

// The sources that call into libtorch: the TorchScript module (loading it, its forward, its
// methods' values) and devices. The addon built without them (TSN_NATIVE_ONLY) serves language
// models on the CPU from their archive's records (native/runtime/NativeChoice.h).
export const TORCH_SOURCES = [
  "native/binding/HostValue.cc",
  "native/common/Device.cc",
  "native/common/DeviceMemory.cc",
  "native/runtime/Checkpoint.cc",
  "native/runtime/Runtime.cc",
  "native/steppers/ModuleWeights.cc",
  "native/steppers/ScriptStepper.cc",
  "native/steppers/TensorLogits.cc",
];

// The sources whose code differs between the two builds (#if TSN_NATIVE_ONLY).
export const VARIANT_SOURCES = [
  "native/binding/LoadWorker.cc",
  "native/binding/TorchModel.cc",
  "native/binding/addon.cc",
  "native/common/Errors.cc",
  "native/common/MappedFile.cc",
  "native/runtime/InferenceThread.cc",
  "native/runtime/LoadCheckCache.cc",
  "native/runtime/ModelCore.cc",
  "native/runtime/NativeChoice.cc",
];

/**
 * The .cc files under native/, sorted, relative to the package root: "torch" all of them (the
 * libtorch addon's), "native" all but TORCH_SOURCES (the build without libtorch), "shared" those
 * compiled once for both (neither TORCH_SOURCES nor VARIANT_SOURCES), "variant" VARIANT_SOURCES,
 * "torch-only" TORCH_SOURCES.
 */
export function addonSources(which) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
  const all = readdirSync(join(root, "native"), { recursive: true })
    .filter((name) => name.endsWith(".cc"))
    .map((name) => `native/${name.split(sep).join("/")}`)
    .sort();
  const torch = (name) => TORCH_SOURCES.includes(name);
  const variant = (name) => VARIANT_SOURCES.includes(name);
  if (which === "torch") return all;
  if (which === "native") return all.filter((name) => !torch(name));
  if (which === "shared") return all.filter((name) => !torch(name) && !variant(name));
  if (which === "variant") return all.filter(variant);
  if (which === "torch-only") return all.filter(torch);
  throw new Error(`--sources ${which}: expected torch, native, shared, variant or torch-only`);
}

/** The numbered ways to provide libtorch, for every "not found" message (this file's and build-native.mjs's). */
export function torchFixes() {
  // Installed as a dependency there is no scripts/setup.sh to point at.
  const asDependency = fileURLToPath(import.meta.url).split(sep).includes("node_modules");
  return [
    "  1. Debian/Ubuntu: sudo apt-get install cmake g++ make libtorch-dev libopenblas0-pthread" +
      (asDependency ? "" : "  (or: sudo bash scripts/setup.sh)"),
    "  2. A downloaded libtorch: export LIBTORCH=/path/to/libtorch  (the folder with share/cmake/Torch)",
    "  3. A Python torch (pip or conda, e.g. with CUDA): make `python3 -c 'import torch'` work, or set TORCHSERVE_PYTHON",
    "  4. Or set Torch_DIR to the folder holding TorchConfig.cmake.",
  ];
}

/**
 * libtorch described by the folder holding its TorchConfig.cmake: <prefix>/share/cmake/Torch
 * (a libtorch download, a pip or conda torch) or <prefix>/lib/<triplet>/cmake/Torch (Debian).
 */
function fromTorchDir(torchDir, source) {
  if (!existsSync(join(torchDir, "TorchConfig.cmake"))) return null;
  for (const prefix of [resolve(torchDir, "..", "..", ".."), resolve(torchDir, "..", "..", "..", "..")]) {
    const include = join(prefix, "include");
    if (!existsSync(join(include, "torch", "script.h"))) continue;
    const lib = [join(prefix, "lib"), resolve(torchDir, "..", "..")].find((dir) => existsSync(join(dir, "libtorch.so")));
    if (!lib) continue;
    return { source, torchDir: resolve(torchDir), include: [include, join(include, "torch", "csrc", "api", "include")], lib };
  }
  return null;
}

function fromPython(env) {
  for (const python of [env.TORCHSERVE_PYTHON, "python3", "/usr/bin/python3", "python"]) {
    if (!python) continue;
    try {
      const prefix = execFileSync(python, ["-c", "import torch.utils; print(torch.utils.cmake_prefix_path)"], {
        encoding: "utf8", stdio: ["ignore", "pipe", "ignore"],
      }).trim();
      const found = prefix && fromTorchDir(join(prefix, "Torch"), `Python torch (${python})`);
      if (found) return found;
    } catch {
      // no torch for this interpreter
    }
  }
  return null;
}

function fromSystem() {
  for (const prefix of ["/usr/local", "/usr"]) {
    const libDirs = [join(prefix, "lib")];
    try {
      libDirs.unshift(...readdirSync(join(prefix, "lib")).filter((name) => /-linux-gnu/.test(name)).map((name) => join(prefix, "lib", name)));
    } catch {
      // no lib folder under this prefix
    }
    const torchDirs = [...libDirs.map((dir) => join(dir, "cmake", "Torch")), join(prefix, "share", "cmake", "Torch")];
    for (const torchDir of torchDirs) {
      const found = fromTorchDir(torchDir, "system");
      if (found) return found;
    }
  }
  return null;
}

/** Thrown when no libtorch is found; the message says where the search looked (torchFixes() says what to do). */
export class TorchNotFoundError extends Error {}

/** The libtorch both builds use, or a TorchNotFoundError. */
export function findTorch(env = process.env) {
  if (env.LIBTORCH || env.Torch_DIR) {
    const found = env.LIBTORCH
      ? fromTorchDir(join(env.LIBTORCH, "share", "cmake", "Torch"), "LIBTORCH")
      : fromTorchDir(env.Torch_DIR, "Torch_DIR");
    if (found) return found;
    const named = env.LIBTORCH ? `LIBTORCH=${env.LIBTORCH}` : `Torch_DIR=${env.Torch_DIR}`;
    throw new TorchNotFoundError(
      `libtorch not found: LIBTORCH/Torch_DIR is set (${named}) but holds no libtorch ` +
        "(TorchConfig.cmake beside include/torch/script.h and libtorch.so).\n" +
        "Point LIBTORCH at an unpacked libtorch folder (the one holding share/cmake/Torch), " +
        "or Torch_DIR at the folder holding TorchConfig.cmake.",
    );
  }
  const found = fromPython(env) ?? fromSystem();
  if (found) return found;
  throw new TorchNotFoundError("libtorch not found (looked at LIBTORCH, Torch_DIR, a Python torch, /usr/local, /usr).");
}

function cxx11Abi(found) {
  try {
    const match = /_GLIBCXX_USE_CXX11_ABI=([01])/.exec(readFileSync(join(found.torchDir, "TorchConfig.cmake"), "utf8"));
    if (match) return match[1];
  } catch {
    // unreadable config: libtorch builds since 2.x and Debian's use the new ABI
  }
  return "1";
}

function hasCuda(found) {
  return existsSync(join(found.lib, "libtorch_cuda.so")) ? "1" : "0";
}

function libs(found) {
  const names = ["torch", "torch_cpu", "c10"];
  if (hasCuda(found) === "1") names.push("torch_cuda", "c10_cuda");
  return names.map((name) => `-l${name}`).join(" ");
}

/**
 * node-addon-api's folder as Node resolves it from this script: under this package's own
 * node_modules in a checkout, hoisted into the consumer's when installed as a dependency.
 */
export function nodeAddonApiDir() {
  return dirname(createRequire(import.meta.url).resolve("node-addon-api/package.json"));
}

// Run as a command (node-gyp calls it through build-gyp/scripts, a symlink: compare real paths).
const asCommand = process.argv[1] && realpathSync(process.argv[1]) === realpathSync(new URL(import.meta.url).pathname);
if (asCommand && process.argv[2] === "--node-addon-api") {
  console.log(nodeAddonApiDir());
} else if (asCommand && process.argv[2] === "--sources") {
  console.log(addonSources(process.argv[3]).join(" "));
} else if (asCommand) {
  let found;
  try {
    found = findTorch();
  } catch (err) {
    if (!(err instanceof TorchNotFoundError)) throw err;
    console.error([err.message, "Fixes, any one of:", ...torchFixes()].join("\n"));
    process.exit(1);
  }
  const what = process.argv[2] ?? "--json";
  if (what === "--include") console.log(found.include.join(" "));
  else if (what === "--libdir") console.log(found.lib);
  else if (what === "--abi") console.log(cxx11Abi(found));
  else if (what === "--libs") console.log(libs(found));
  else if (what === "--has-cuda") console.log(hasCuda(found));
  else if (what === "--cmake") console.log([found.torchDir, found.lib, hasCuda(found), found.source].join(";"));
  // Whole flags, for gyp's <!@(...) list expansion (it does not expand inside a string).
  else if (what === "--defines") console.log(`_GLIBCXX_USE_CXX11_ABI=${cxx11Abi(found)} TSN_TORCH_HAS_CUDA=${hasCuda(found)}`);
  else if (what === "--ldflags") console.log(`-L${found.lib} -Wl,-rpath,${found.lib} ${libs(found)}`);
  else console.log(JSON.stringify({ ...found, abi: cxx11Abi(found), hasCuda: hasCuda(found) === "1" }, null, 2));
}
