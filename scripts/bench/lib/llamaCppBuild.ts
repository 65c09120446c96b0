/**
 * Which of node-llama-cpp's prebuilt CPU builds the llama.cpp arm runs. Its Linux x64 package
 * ships one ggml CPU library per instruction set (haswell = AVX2, zen4 / skylakex / icelake /
 * ... = AVX-512, sse42, x64), and ggml loads the best one the CPU runs. On an AVX-512 host
 * that is an AVX-512 build, so our avx2 kernels would be timed against llama.cpp's AVX-512
 * code: to compare one instruction set with the same one, the arm can be made to load a named
 * build instead. node-llama-cpp takes no option for it, so the package is copied to a
 * temporary directory holding only that build, and its import is resolved there (a module
 * resolve hook), before node-llama-cpp is imported.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { register } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const packageName = "@node-llama-cpp/linux-x64";
const cpuLibrary = /^libggml-cpu-(.+)\.so$/;

/** The CPU builds the installed package ships (haswell, zen4, ...). */
export function llamaCppCpuBuilds(): string[] {
  return readdirSync(binsDir()).flatMap((name) => cpuLibrary.exec(name)?.[1] ?? []).sort();
}

function packageDir(): string {
  return dirname(dirname(fileURLToPath(import.meta.resolve(packageName))));
}

function binsDir(): string {
  return join(packageDir(), "bins", "linux-x64");
}

/**
 * llama.cpp's build for the instruction set each kernel family is written for: the same
 * instructions on both sides (ggml's `cooperlake` has AVX-512 with VNNI and BF16, as our
 * avx512_bf16 family uses; `skylakex` AVX-512 without VNNI, as our avx512 family; `x64` no
 * AVX, as our baseline family, which is SSE2).
 */
const familyBuilds: Record<string, string> = {
  amx: "sapphirerapids",
  avx512_bf16: "cooperlake",
  avx512: "skylakex",
  avx2: "haswell",
  baseline: "x64",
};

/**
 * The build the llama.cpp arm should load for these kernel families: where every family timed
 * is the same one, llama.cpp's build for that instruction set (familyBuilds); otherwise
 * undefined (ggml's own pick, the best the CPU runs, which every family is then compared with).
 */
export function matchingLlamaCppBuild(families: readonly string[]): string | undefined {
  const first = families[0];
  if (first === undefined || !families.every((family) => family === first)) return undefined;
  return familyBuilds[first];
}

/**
 * Imports node-llama-cpp; with `build`, so that only that CPU build can load. Call it once, before
 * anything else imports node-llama-cpp. Returns the module and a cleanup for the copy.
 */
export async function importNodeLlamaCpp(build?: string): Promise<{ module: typeof import("node-llama-cpp"); cleanup: () => void }> {
  if (!build) return { module: await import("node-llama-cpp"), cleanup: () => {} };
  const builds = llamaCppCpuBuilds();
  if (!builds.includes(build)) throw new Error(`node-llama-cpp has no CPU build "${build}" (it ships: ${builds.join(", ")})`);
  const source = packageDir();
  const copy = mkdtempSync(join(tmpdir(), "llamacpp-build-"));
  const copyBins = join(copy, "bins", "linux-x64");
  mkdirSync(copyBins, { recursive: true });
  mkdirSync(join(copy, "dist"));
  copyFileSync(join(source, "package.json"), join(copy, "package.json"));
  for (const name of readdirSync(join(source, "dist"))) copyFileSync(join(source, "dist", name), join(copy, "dist", name));
  const bins = binsDir();
  for (const name of readdirSync(bins)) {
    const variant = cpuLibrary.exec(name)?.[1];
    if (variant === undefined || variant === build) copyFileSync(join(bins, name), join(copyBins, name));
  }
  const target = pathToFileURL(join(copy, "dist", "index.js")).href;
  const hooks = `let target;
export function initialize(data) { target = data.target; }
export async function resolve(specifier, context, next) {
  return specifier === ${JSON.stringify(packageName)} ? { url: target, shortCircuit: true } : next(specifier, context);
}`;
  register(`data:text/javascript,${encodeURIComponent(hooks)}`, { data: { target } });
  const cleanup = () => rmSync(copy, { recursive: true, force: true });
  process.once("exit", cleanup);
  const module = await import("node-llama-cpp");
  return { module, cleanup };
}
