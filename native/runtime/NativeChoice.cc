#include "runtime/NativeChoice.h"

#include <cstdio>
#include <optional>
#include <sstream>

#include <torch/version.h>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "common/Parallel.h"
#include "runtime/ArchiveWeights.h"
#include "runtime/LoadCheckCache.h"
#include "steppers/NativeRegistry.h"

namespace tsn {

bool FastBf16Matmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
}

bool NeedsTiming(const std::string& family) { return family == "baseline"; }

// The TorchScript forward serves only when clearly faster: timings at load move by a few
// percent with the neighbours, and a wrong flip to it costs more than one to native.
constexpr double kScriptMargin = 1.2;
double ScriptBudget(double nativeSeconds) { return nativeSeconds / kScriptMargin; }

RuntimeVerdict DecideRuntime(const std::string& family, const RuntimeTimings& timings) {
  if (!NeedsTiming(family)) {
    return {true, "native runtime, " + family +
                      " kernels: 1.3-12x the TorchScript forward's decode at every batch size on this family, "
                      "and at par or ahead in prefill"};
  }
  char figures[200];
  if (timings.scriptStopped) {
    std::snprintf(figures, sizeof figures,
                  "a short workload took %.1f ms native (%s kernels); TorchScript was stopped %.1f ms into a run of "
                  "it, once it could no longer be chosen",
                  timings.native * 1e3, family.c_str(), timings.script * 1e3);
    return {true, std::string("native runtime: ") + figures};
  }
  std::snprintf(figures, sizeof figures, "a short workload took %.1f ms native (%s kernels), %.1f ms TorchScript",
                timings.native * 1e3, family.c_str(), timings.script * 1e3);
  if (timings.native > 0 && timings.script > 0 && timings.script < ScriptBudget(timings.native)) {
    return {false, std::string("TorchScript runtime: ") + figures};
  }
  return {true, std::string("native runtime: ") + figures};
}

std::string RememberedCheckNote(const CheckVerdict& verdict, const LoadCheckCache& cache) {
  return "load-time check " + std::string(verdict.agrees ? "passed" : "failed") + " on " + verdict.checked +
         " for this archive, build and kernel family (remembered in " + cache.file() + ")";
}

double ToleranceFor(const RuntimeRequest& request) {
  const bool quantized = !request.fields.String("quantization", "").empty();
  return quantized ? kToleranceQuantized : request.dtype != at::kFloat ? kTolerance16 : kTolerance32;
}

std::string CheckKey(const RuntimeRequest& request, const std::string& family, const std::string& digest, double tolerance) {
  std::ostringstream key;
  key.precision(17);
  key << "torchserve-node load-time check 1\n"
      << "archive " << digest << "\n"
      << "addon " << AddonIdentity() << "\n"
      << "libtorch " << TORCH_VERSION << "\n"
      << "architecture " << request.architecture << "\n"
      << "dtype " << c10::toString(request.dtype) << "\n"
      << "kernels " << family << "\n"
      << "threads " << request.threads << "\n"
      << "tolerance " << tolerance << "\n";
  for (const auto& [name, value] : request.fields.numbers) key << "config " << name << " " << value << "\n";
  for (const auto& [name, value] : request.fields.strings) key << "config " << name << " \"" << value << "\"\n";
  return key.str();
}

bool NativeFromArchive(LoadedModel& model, const RuntimeRequest& request, RuntimeChoice& choice, PhaseClock& clock) {
  if (request.runtime == "torchscript" || request.forceCheck || !model.index || !model.device.is_cpu() ||
      request.checkCacheDir.empty()) {
    return false;
  }
  const NativeFactory factory = FindNativeStepper(request.architecture);
  if (!factory) return false;
  const KernelSet* kernels = nullptr;
  try {
    kernels = &SelectKernels(request.kernels);
  } catch (const std::exception&) {
    return false;  // the choice below reports it
  }
  if (request.runtime == "auto" && NeedsTiming(kernels->name)) return false;
  const std::string digest = ArchiveDigest(model.path);
  if (digest.empty()) return false;
  const LoadCheckCache cache(request.checkCacheDir, CheckKey(request, kernels->name, digest, ToleranceFor(request)));
  const std::optional<CheckVerdict> verdict = cache.Find();
  if (!verdict || !verdict->agrees || verdict->cacheShape.empty()) return false;
  try {
    const RegroupedRows regrouped = model.layout               ? RegroupedRows::kInLayoutFile
                                    : !model.layoutDir.empty() ? RegroupedRows::kToLayoutFile
                                                               : RegroupedRows::kRewritten;
    std::string note;
    const CheckpointWeights weights = ArchiveWeights(*model.index, model.path, verdict->cacheShape, *kernels, regrouped,
                                                     model.source.mapWeights, static_cast<int>(LoadThreads()), &note);
    clock.Lap("archive");
    choice.stepper = factory(NativeContext{weights, request.fields, *kernels, request.threads, request.kvBudgetBytes});
    clock.Lap("pack");
    model.weightsNote = note;
  } catch (const std::exception&) {
    choice.stepper.reset();
    return false;
  }
  const RuntimeVerdict decision = request.runtime == "native"
                                      ? RuntimeVerdict{true, "native runtime, " + std::string(kernels->name) + " kernels: asked for"}
                                      : DecideRuntime(kernels->name, RuntimeTimings{});
  choice.runtime = "native";
  choice.kernels = kernels->name;
  choice.note = decision.reason + "; " + RememberedCheckNote(*verdict, cache);
  return true;
}


#if TSN_NATIVE_ONLY
// The build without libtorch serves what NativeFromArchive builds, and nothing else: the
// caller (TorchEngine) then loads the checkpoint with the addon that has libtorch.
RuntimeChoice ChooseRuntime(LoadedModel& model, const RuntimeRequest& request) {
  RuntimeChoice choice;
  PhaseClock clock(choice.phases);
  if (NativeFromArchive(model, request, choice, clock)) return choice;
  throw CodedError(ErrorCode::kNeedsLibtorch,
                   "this checkpoint needs libtorch to load (no remembered verdict of the load-time check lets the "
                   "native runtime serve it from its records)");
}
#endif

}  // namespace tsn
