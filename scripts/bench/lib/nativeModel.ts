/** A checkpoint loaded for timing on the native runtime: the kernels asked for or an error. */
import { loadAddon } from "../../../src/native/binding.js";
import type { KernelFamily, RawLanguageModel } from "../../../src/native/types.js";

/**
 * Loads `path` on the CPU and configures the native runtime with `kernels`, end-of-sequence off
 * (every row decodes the tokens asked for), no prefix cache (repeated timing runs compute their
 * prompts) and the module's weights released as TorchEngine releases them. Throws if the
 * runtime or the kernels are not the ones asked for. The caller disposes of the model.
 */
export async function loadNativeForTiming(
  path: string,
  threads: number,
  kernels: KernelFamily,
): Promise<{ model: RawLanguageModel; config: Record<string, unknown> }> {
  const model = await loadAddon().loadLanguageModel(path, { device: "cpu", threads, extraFiles: ["config.json"] });
  try {
    const config = JSON.parse(model.extraFiles["config.json"]!) as Record<string, unknown>;
    const chosen = await model.configure({
      contextLength: Number(config.block_size),
      eosTokenIds: [],
      prefixCache: false,
      runtime: "native",
      kernels,
      architecture: String(config.architecture),
      dtype: config.dtype as "float32" | "bfloat16",
      modelConfig: config,
      // As TorchEngine serves: the runtime owns the weights (the avx2 family then interleaves
      // Q4_K rows, its products' own layout).
      releaseModuleWeights: true,
    });
    if (chosen.runtime !== "native") throw new Error(`native runtime refused: ${chosen.note}`);
    if (chosen.kernels !== kernels) throw new Error(`asked for the ${kernels} kernels, got ${chosen.kernels}`);
    return { model, config };
  } catch (error) {
    await model.dispose();
    throw error;
  }
}
