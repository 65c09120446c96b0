// The parts of the runtime choice that need no libtorch (Runtime.h's rules and the TorchScript
// timing's, the load-time check's probe and its comparison, and its verdicts as
// NativeFromArchive takes or makes them), shared by the addon and by its build without libtorch
// (TSN_NATIVE_ONLY), whose ChooseRuntime is NativeFromArchive alone.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ArchiveIndex.h"
#include "runtime/LoadCheckCache.h"
#include "runtime/Runtime.h"
#include "steppers/Stepper.h"

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

// The TorchScript runtime's settings a timing of it holds for, as one word for the remembered
// verdict (LoadCheckCache's timing line).
std::string ScriptSettings(const RuntimeRequest& request);

// Whether the TorchScript runtime computes this checkpoint in float32: a 16-bit checkpoint on
// a CPU without fast 16-bit matmuls does (float16 has no CPU matmul kernels in torch 1.13 at
// all), unless SERVICE_TORCHSCRIPT_COMPUTE asks otherwise.
bool ScriptWidens(bool cpu, const RuntimeRequest& request);

// Whether the TorchScript runtime dequantizes a quantized checkpoint's weights on every call
// (SERVICE_TORCHSCRIPT_DEQUANTIZE; "auto": on the CPU).
bool ScriptDequantizesEveryCall(bool cpu, const RuntimeRequest& request);

// Why the baseline family's timing leaves the TorchScript forward out (empty where it times
// it). That forward of a quantized checkpoint dequantizes every weight on every call on the
// CPU: on a 1B Q8_0 model it decoded 2.5x (8 rows) to 11x (1 row) slower than the family's
// SSE2 integer products, even with libtorch's AVX-512 matmuls, and prefilled within 1.1x of
// them, and timing the two took a minute of the first load. A 16-bit checkpoint it computes
// in float32 costs a float32 copy of the weights, twice their size: a second copy the native
// runtime does not hold; on a 1B bf16 model it also decoded 1.6x (8 rows) to 4.7x (1 row)
// slower, with OpenBLAS held to its SSE kernels (OPENBLAS_CORETYPE=Nehalem), and prefilled
// 1.05x slower.
std::string UntimedScript(bool cpu, const RuntimeRequest& request);

// The choice between the runtimes, for a checkpoint the native runtime agrees with, where it
// needs no timing run now: the native runtime asked for ("native"), a family "auto" does not
// time (DecideRuntime's rule), the TorchScript forward left out of the timing (UntimedScript),
// or a timing remembered with `verdict` for these TorchScript settings (which may choose
// TorchScript). None where "auto" must time the runtimes.
// (The native runtime runs on the CPU only: UntimedScript is asked for the CPU.)
std::optional<RuntimeVerdict> DecisionUntimed(const std::string& family, const RuntimeRequest& request,
                                              const std::optional<CheckVerdict>& verdict);

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

// ---- The load-time check's probe, in plain C++: both builds run it ----

// Prompt tokens for the load-time checks: [rows, length] ids spread over 0..199, row-major.
std::vector<int64_t> ProbeTokens(int64_t rows, int64_t length);

// The load-time probe: two rows at different positions, a mixed prefill (4 and 2 tokens) then
// a decode step, in a cache of two rows: padding, positions and the cache written by the
// prefill and read by the decode are all exercised. Row 0 prefills the first `first` tokens of
// its ProbeTokens row and row 1 the first `second` of its own; each then decodes its row's next
// token (a context of 2, the least an export allows, still holds a prefill and a decode).
struct Probe {
  explicit Probe(int64_t context);
  int64_t first, second;
  std::vector<int64_t> tokens;  // [2, first + 1]
  int64_t token(int64_t row, int64_t t) const { return tokens[static_cast<size_t>(row * (first + 1) + t)]; }
};

// The logits of the probe's two steps (its prefill, then its decode), each [2, vocabulary]
// float32, row-major.
using ProbeSteps = std::vector<std::vector<float>>;

// The candidate's logits of both steps, run as a server runs them: the prefill, then a decode
// step reading the cache the prefill wrote.
ProbeSteps ProbeLogits(Stepper& stepper, const Probe& probe);

// The reference's logits of the same two steps from one step of four rows (each row's prefill,
// and its prefill with the decoded token): a causal model's logits after a token do not depend
// on how its prefix was fed, and one call passes over the weights once (a quantized
// checkpoint's TorchScript forward dequantizes every weight on every call: two calls cost
// twice the check).
ProbeSteps ReferenceLogits(Stepper& stepper, const Probe& probe);

// The reference logits a checkpoint carries from its export (export_gpt.py's
// load_check_reference: the magic, int64 first, second, rows and vocabulary size, the probe's
// int64 tokens, float32 logits [4, vocabulary], little-endian as this CPU), split as
// ReferenceLogits splits its own. Empty where they are absent, malformed or for another probe
// (another probe length or tokens, or another vocabulary than config.json's `vocab`).
ProbeSteps StoredReference(const std::string& blob, const Probe& probe, int64_t vocab);

// Largest logit difference of two probes, relative to the size of the reference's finite
// logits. Infinite where their shapes differ, or where either holds a NaN or an infinity the
// other does not (a NaN difference must not let any logits agree).
double Disagreement(const ProbeSteps& reference, const ProbeSteps& candidate);

// The stored reference logits of `model` for `probe` (StoredReference, against config.json's
// vocab_size); empty where it has none this probe can use.
ProbeSteps StoredReferenceOf(const LoadedModel& model, const RuntimeRequest& request, const Probe& probe);

// How many threads the check's native forward runs on: the probe passes over every weight twice
// (8B Q8_0, one thread: 1.6-2.4 s, most of a first load from the page cache), so it runs on the
// load's threads, as reading and packing do; the stepper serves on the threads asked for after it.
int CheckThreads(const RuntimeRequest& request);

// The check on a native stepper built on CheckThreads: its logits on `probe` against `expected`
// (ToleranceFor the request), the verdict holding `cacheShape`; the stepper then serves on the
// threads asked for.
CheckVerdict CheckStepper(Stepper& native, const Probe& probe, const ProbeSteps& expected, const RuntimeRequest& request,
                          std::vector<int64_t> cacheShape, PhaseClock& clock);

// Remembers the verdict of a check that has just run (its time stamped), and gives the runtime
// note's clause on it: "load-time check ran" (against the stored reference where `stored`),
// and where the verdict was remembered, or why it could not be.
std::string RememberCheck(CheckVerdict& verdict, const LoadCheckCache& cache, bool stored);

// The checkpoint's cache_shape(1) as its module would give it, read from the archive's root
// module attributes (ArchiveModule): empty where the root module is not the class of
// `architecture`'s registered native stepper, or lacks one of the attributes.
std::vector<int64_t> ArchiveCacheShape(const ArchiveIndex& index, const std::string& architecture);

// A load's way past the TorchScript module (OpenCheckpoint deferred it), on the CPU, where the
// native runtime is asked for or "auto" chooses it with no timing run now (DecisionUntimed: every
// family but the baseline; there, a TorchScript forward left out of the timing, or a timing
// remembered that chose native):
// - a later load: where the load-time check's verdict for this archive, build, kernel family
//   and settings is remembered as agreeing, with the checkpoint's cache shape, the native
//   stepper is built from the archive's records (ArchiveWeights);
// - a first load (no verdict remembered, or none can be): where the archive carries the
//   check's reference logits from its export (StoredReference) and its cache shape can be read
//   from its attributes (ArchiveCacheShape), the stepper is built from the records and checked
//   against them as the module's load would check it, and the verdict is remembered.
// False, with nothing built, where any of that does not hold, the check disagrees (its verdict
// is remembered: the module's load then finds it, and the TorchScript runtime serves), or the
// records cannot be taken as they lie: the module is then loaded, and the choice made as on any
// load.
bool NativeFromArchive(LoadedModel& model, const RuntimeRequest& request, RuntimeChoice& choice, PhaseClock& clock);

}  // namespace tsn
