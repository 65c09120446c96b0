#!/usr/bin/env node
// libtorch discovery for node-gyp (binding.gyp), in the same order as CMakeLists.txt:
// LIBTORCH / Torch_DIR, then a Python torch install, then the system (Debian libtorch-dev).
//   node scripts/torch-paths.mjs --include | --defines | --ldflags | --libdir | --libs | --abi | --has-cuda | --json
// and node-addon-api's include folder for both builds:
//   node scripts/torch-paths.mjs --node-addon-api
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";

function fromPrefix(prefix, source) {
  // prefix holds include/ and lib/ (a libtorch folder, or python's site-packages/torch)
  const include = join(prefix, "include");
  const lib = join(prefix, "lib");
  if (!existsSync(join(include, "torch", "script.h")) || !existsSync(join(lib, "libtorch.so"))) return null;
  const config = join(prefix, "share", "cmake", "Torch", "TorchConfig.cmake");
  return { source, include: [include, join(include, "torch", "csrc", "api", "include")], lib, config };
}

function fromTorchDir(torchDir, source) {
  // Torch_DIR = <prefix>/share/cmake/Torch
  return fromPrefix(resolve(torchDir, "..", "..", ".."), source);
}

function fromPython() {
  for (const python of [process.env.TORCHSERVE_PYTHON, "python3", "/usr/bin/python3", "python"]) {
    if (!python) continue;
    try {
      const dir = execFileSync(python, ["-c", "import torch, os; print(os.path.dirname(torch.__file__))"], {
        encoding: "utf8", stdio: ["ignore", "pipe", "ignore"],
      }).trim();
      const found = dir && fromPrefix(dir, `Python torch (${python})`);
      if (found) return found;
    } catch {
      // no torch for this interpreter
    }
  }
  return null;
}

function fromSystem() {
  const include = "/usr/include";
  if (!existsSync(join(include, "torch", "script.h"))) return null;
  const multiarch = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"]
    .find((dir) => existsSync(join(dir, "libtorch.so")));
  if (!multiarch) return null;
  return {
    source: "system",
    include: [include, join(include, "torch", "csrc", "api", "include")],
    lib: multiarch,
    config: join(multiarch, "cmake", "Torch", "TorchConfig.cmake"),
  };
}

export function findTorch(env = process.env) {
  if (env.LIBTORCH) return fromPrefix(env.LIBTORCH, "LIBTORCH");
  if (env.Torch_DIR) return fromTorchDir(env.Torch_DIR, "Torch_DIR");
  return fromPython() ?? fromSystem();
}

function cxx11Abi(found) {
  try {
    const match = /_GLIBCXX_USE_CXX11_ABI=([01])/.exec(readFileSync(found.config, "utf8"));
    if (match) return match[1];
  } catch {
    // no config file: libtorch builds since 2.x and Debian's use the new ABI
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
} else if (asCommand) {
  const found = findTorch();
  if (!found) {
    console.error("libtorch not found (LIBTORCH, Torch_DIR, python torch, /usr): see `npm run build:native` for fixes");
    process.exit(1);
  }
  const what = process.argv[2] ?? "--json";
  if (what === "--include") console.log(found.include.join(" "));
  else if (what === "--libdir") console.log(found.lib);
  else if (what === "--abi") console.log(cxx11Abi(found));
  else if (what === "--libs") console.log(libs(found));
  else if (what === "--has-cuda") console.log(hasCuda(found));
  // Whole flags, for gyp's <!@(...) list expansion (it does not expand inside a string).
  else if (what === "--defines") console.log(`_GLIBCXX_USE_CXX11_ABI=${cxx11Abi(found)} TSN_TORCH_HAS_CUDA=${hasCuda(found)}`);
  else if (what === "--ldflags") console.log(`-L${found.lib} -Wl,-rpath,${found.lib} ${libs(found)}`);
  else console.log(JSON.stringify({ ...found, abi: cxx11Abi(found), dirname: dirname(found.lib) }, null, 2));
}
