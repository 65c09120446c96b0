/**
 * The one place that loads the native addon. It tries the known build locations and, if all
 * fail, throws one error listing what was tried and the numbered fixes.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";

import { ServingError } from "../errors.js";
import type { RawAddon, RawNativeAddon } from "./types.js";

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** Build outputs in the order tried: an explicit override, cmake-js, node-gyp. */
export function addonCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  const candidates: string[] = [];
  if (env.TORCHSERVE_ADDON) candidates.push(resolve(env.TORCHSERVE_ADDON));
  for (const config of ["Release", "Debug"]) {
    candidates.push(join(packageRoot, "build", config, "torchserve.node"));
    candidates.push(join(packageRoot, "build-gyp", "build", config, "torchserve.node"));
  }
  return candidates;
}

/** Where the build without libtorch lies: beside each libtorch addon candidate. */
export function nativeAddonCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  return addonCandidates(env).map((path) => join(dirname(path), "torchserve-native.node"));
}

let cached: RawAddon | undefined;
let cachedNative: RawNativeAddon | null | undefined;
let preloading: Promise<void> | undefined;

/**
 * Loads the addon on a worker thread, so this thread can work meanwhile: the dynamic loader and
 * libtorch's static initialisers take 0.45-0.7 s, once per process. A loadAddon() after it finds
 * the library already in the process (each thread then only initialises its own exports).
 * Resolves, never rejects, once the worker is done: a failure is loadAddon()'s to report, with
 * its fixes. A second call while one is under way waits for the same worker.
 */
export function preloadAddon(): Promise<void> {
  if (cached) return Promise.resolve();
  if (preloading) return preloading;
  setLoadEnvironment();
  const candidate = addonCandidates().find((path) => existsSync(path));
  if (candidate === undefined) return Promise.resolve();
  preloading = new Promise((done) => {
    const worker = new Worker('require(require("node:worker_threads").workerData)', { eval: true, workerData: candidate });
    worker.once("error", () => done());
    worker.once("exit", () => done());
  });
  return preloading;
}

function setLoadEnvironment(): void {
  // libgomp reads its settings when libtorch is loaded: idle OpenMP workers must sleep,
  // not spin, or they steal the cores the inference thread needs.
  process.env.OMP_WAIT_POLICY ??= "PASSIVE";
}

/** Loads (once) and returns the raw addon. Throws ServingError ERR_ADDON_LOAD with fixes. */
export function loadAddon(): RawAddon {
  if (cached) return cached;
  setLoadEnvironment();
  const require = createRequire(import.meta.url);
  const tried: string[] = [];
  for (const candidate of addonCandidates()) {
    if (!existsSync(candidate)) {
      tried.push(`${candidate}: not built`);
      continue;
    }
    try {
      cached = require(candidate) as RawAddon;
      return cached;
    } catch (err) {
      tried.push(`${candidate}: ${(err as Error).message.split("\n")[0]}`);
    }
  }
  throw new ServingError(
    "ERR_ADDON_LOAD",
    [
      "The libtorch addon (torchserve.node) could not be loaded.",
      "Tried:",
      ...tried.map((line) => `  - ${line}`),
      "Fixes:",
      "  1. Not built yet: run `npm run build:native` (or `bash scripts/setup.sh`, which also installs libtorch on Debian);",
      "     installed as a dependency (its install script skipped or failed): `npm rebuild torchserve-node`.",
      "  2. libtorch missing at run time (\"libtorch.so: cannot open shared object file\"): install it",
      "     (Debian: sudo apt-get install libtorch-dev) or add your libtorch's lib folder to LD_LIBRARY_PATH.",
      "  3. Built for another Node ABI or machine: build it again on this one (as in 1).",
      "  4. A build elsewhere: point TORCHSERVE_ADDON at the .node file.",
    ].join("\n"),
  );
}

/**
 * The addon built without libtorch (RawNativeAddon), loaded once: it loads in milliseconds, where
 * the libtorch addon's loading takes 0.45-0.7 s. Undefined where it is not built or does not load
 * (TORCHSERVE_NATIVE_ADDON=off asks for that too): the libtorch addon then does everything.
 */
export function loadNativeAddon(env: NodeJS.ProcessEnv = process.env): RawNativeAddon | undefined {
  if (cachedNative !== undefined) return cachedNative ?? undefined;
  cachedNative = null;
  if (env.TORCHSERVE_NATIVE_ADDON === "off") return undefined;
  const require = createRequire(import.meta.url);
  // The first that exists, and only it: one built beside another libtorch addon is another build's.
  const candidate = nativeAddonCandidates(env).find((path) => existsSync(path));
  const libtorchAddon = addonCandidates(env).find((path) => existsSync(path));
  if (candidate === undefined || libtorchAddon === undefined || dirname(candidate) !== dirname(libtorchAddon)) return undefined;
  try {
    const addon = require(candidate) as RawNativeAddon;
    if (addon.withoutLibtorch === true) cachedNative = addon;
  } catch {
    // Not loadable here (another Node ABI): the libtorch addon serves.
  }
  return cachedNative ?? undefined;
}
