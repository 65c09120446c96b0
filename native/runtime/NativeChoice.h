// The parts of the runtime choice that need no libtorch (Runtime.h's rules, and the load-time
// check's remembered verdicts as NativeFromArchive takes them), shared by the addon and by its
// build without libtorch (TSN_NATIVE_ONLY), whose ChooseRuntime is NativeFromArchive alone.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "runtime/LoadCheckCache.h"
#include "runtime/Runtime.h"

namespace tsn {

// Largest relative logit difference accepted from the native runtime. float32: both compute
// the same sums in a different order (1e-3 leaves room for that and nothing else). 16-bit
// checkpoints are compared with the checkpoint's forward run in float32 on the same 16-bit
// weights (the TorchScript bf16 forward rounds every activation to 8 significant bits, the
// native one accumulates in float32: comparing those two would measure TorchScript's rounding);
// the native runtime still rounds activations to bf16 before each AVX512_BF16 dot product
// (relative error 2^-9 per product input), which after a few layers moves logits by up to ~1% of
// their largest magnitude. 2e-2 allows that, while a layout or rotary mistake moves them by O(1).
// Quantized checkpoints (config.json "quantization") are compared with their TorchScript
// forward, which dequantizes the weights and computes in float32; the native runtime also
// quantizes the activations to 8 bits (as llama.cpp does: per block of 32 for Q8_0 weights, per
// 256 for the K-quants; relative error up to 2^-8 of the block's largest input), and that alone
// compounds over the layers: on the Llama-3.2-1B shape with random weights (16 layers), the
// checkpoint's own float forward with its linear inputs so rounded moved the logits by 0.054
// (per 32) and 0.076 (per 256) of their largest magnitude, and a Q4_K_M file quantized by
// llama.cpp measured 0.065 here on two kernel families that agree with each other. 0.15 leaves
// room for deeper models, while a layout, scale or rotary mistake moves logits by O(1).
inline constexpr double kTolerance32 = 1e-3;
inline constexpr double kTolerance16 = 2e-2;
inline constexpr double kToleranceQuantized = 0.15;

// The largest relative logit difference the check accepts for this checkpoint.
double ToleranceFor(const RuntimeRequest& request);

// How long the TorchScript forward's timed run may take and still be chosen: the margin
// (kScriptMargin) under the native runtime's time.
double ScriptBudget(double nativeSeconds);

// Seconds since the last Lap (or construction), recorded under `name` in `phases`.
class PhaseClock {
 public:
  explicit PhaseClock(std::vector<std::pair<std::string, double>>& phases) : phases_(phases) {}
  void Lap(const std::string& name) {
    const auto now = std::chrono::steady_clock::now();
    phases_.emplace_back(name, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

 private:
  std::vector<std::pair<std::string, double>>& phases_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Everything a verdict of the load-time check depends on, one fact a line: the archive's
// contents (its digest), the addon and libtorch builds (the native forward, the probe and the
// tolerances are compiled in), the kernel family and thread count the native forward ran on,
// and config.json as the runtime reads it.
std::string CheckKey(const RuntimeRequest& request, const std::string& family, const std::string& digest, double tolerance);

// The runtime note's clause on a remembered verdict ("load-time check passed on <date> ...").
std::string RememberedCheckNote(const CheckVerdict& verdict, const LoadCheckCache& cache);

// A later load's way past the TorchScript module (OpenCheckpoint deferred it): where the
// load-time check's verdict for this archive, build, kernel family and settings is remembered
// as agreeing, with the checkpoint's cache shape, and the native runtime serves untimed (every
// family but the baseline, whose "auto" times both runtimes) or is asked for, the native
// stepper is built from the archive's records (ArchiveWeights). False, with nothing built,
// where any of that does not hold or the records cannot be taken as they lie: the module is
// then loaded, and the choice made as on any load.
bool NativeFromArchive(LoadedModel& model, const RuntimeRequest& request, RuntimeChoice& choice, PhaseClock& clock);

}  // namespace tsn
