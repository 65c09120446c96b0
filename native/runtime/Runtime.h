// Which Stepper runs a language model. A registry maps an architecture name (config.json
// "architecture") to its native CPU stepper; "auto" uses it where the checkpoint is on the
// CPU and the native forward reproduces the checkpoint's own, else the TorchScript forward.
// The registry is steppers/NativeRegistry.h: the next architecture is one new stepper, which
// registers itself.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/Checkpoint.h"
#include "steppers/ModelFields.h"
#include "steppers/Stepper.h"

namespace tsn {

struct RuntimeRequest {
  std::string runtime = "auto";   // "auto", "native" or "torchscript"
  std::string architecture;       // config.json "architecture"
  std::string kernels = "auto";   // kernel family cap for native steppers (SERVICE_KERNELS)
  c10::ScalarType dtype = at::kFloat;  // the checkpoint's dtype: its TorchScript cache
  // What the TorchScript runtime computes a 16-bit checkpoint in on the CPU
  // (SERVICE_TORCHSCRIPT_COMPUTE): "auto" (float32 where the CPU has no fast 16-bit matmuls),
  // "checkpoint" (its own dtype) or "float32".
  std::string scriptCompute = "auto";
  // When the TorchScript runtime dequantizes a quantized checkpoint's weights
  // (SERVICE_TORCHSCRIPT_DEQUANTIZE): "auto" (once at load on a GPU, on every call on the CPU),
  // "once" or "every-call". Once holds them dequantized in the checkpoint's dtype (float32).
  std::string scriptDequantize = "auto";
  // Whether the TorchScript runtime runs the forward through torch's graph optimiser
  // (SERVICE_TORCHSCRIPT_OPTIMIZE): "auto" (on for a float checkpoint, off for a quantized one:
  // ScriptStepper), "on" or "off".
  std::string scriptOptimize = "auto";
  int64_t kvBudgetBytes = 0;      // cache budget (SERVICE_KV_BUDGET_MB); 0: each runtime's default
  // Once the native runtime is chosen, release the module's parameters (it has packed its own
  // copy), so the weights are held once. The module's forward cannot run after that, nor can
  // the model be configured again.
  bool releaseModuleWeights = false;
  ModelFields fields;             // config.json, flattened
  int threads = 1;
  // Where verdicts of the load-time check are remembered (SERVICE_LOAD_CHECK_CACHE; see
  // runtime/LoadCheckCache.h); empty: nowhere, the check runs on every load.
  std::string checkCacheDir;
  // Run the check even when a verdict is remembered (SERVICE_LOAD_CHECK=always), and
  // remember the new one.
  bool forceCheck = false;
};

struct RuntimeChoice {
  std::unique_ptr<Stepper> stepper;
  std::string runtime;  // "native" or "torchscript"
  std::string kernels;  // the kernel family of a native stepper; empty for TorchScript
  std::string note;     // why "auto" chose the runtime it chose
  // Seconds of each step of the choice, in order ("check", "pack", ...), for the load log.
  std::vector<std::pair<std::string, double>> phases;
  // The stepper has run calls already (the timing ran the TorchScript forward it chose, twice
  // over its workload): its first-call cost is paid, and configure runs no warm-up.
  bool warm = false;
};

// Seconds the same short workload took on each runtime at load; 0 when not timed.
struct RuntimeTimings {
  double native = 0;
  double script = 0;
  // The TorchScript run was stopped once it could no longer be chosen (ScriptBudget): `script`
  // is where it stood then, a lower bound.
  bool scriptStopped = false;
};

struct RuntimeVerdict {
  bool native = true;
  std::string reason;
};

// The rule "auto" applies once the native forward agrees with the checkpoint's: on the
// AVX-512 and AVX2 families the native runtime's decode is 1.3-12x the TorchScript forward's
// at every batch size, and its prefill at par or ahead (docs/benchmarks.md, per family), so
// it serves untimed; on the
// baseline family (no AVX2: OpenBLAS may still be faster at prefill) both runtimes are timed
// on a short workload and the faster one serves (the TorchScript one only when clearly
// faster, so noise does not flip the choice), except where the TorchScript forward would
// dequantize every weight on every call or widen a 16-bit checkpoint to float32
// (UntimedScript in Runtime.cc): native then serves untimed.
bool NeedsTiming(const std::string& family);
RuntimeVerdict DecideRuntime(const std::string& family, const RuntimeTimings& timings);

// Whether this CPU multiplies bfloat16 at a useful rate in libtorch (AVX512_BF16 or AMX):
// elsewhere torch 1.13's bf16 matmul ran 64x slower than float32 (1.4 against 92 GFLOP/s).
bool FastBf16Matmul();

// Runs on the inference thread. Throws CodedError when "native" was demanded and cannot be
// used, or the request is malformed. A model whose module was deferred (OpenCheckpoint) gets
// the native runtime from its archive's records where a remembered verdict allows it, else its
// module is loaded here (LoadModule).
RuntimeChoice ChooseRuntime(LoadedModel& model, const RuntimeRequest& request);

}  // namespace tsn
