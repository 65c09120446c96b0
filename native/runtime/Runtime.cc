#include "runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "runtime/LoadCheckCache.h"
#include "runtime/NativeChoice.h"
#include "steppers/ModuleWeights.h"
#include "steppers/NativeRegistry.h"
#include "steppers/ScriptStepper.h"
#include "steppers/TensorLogits.h"

namespace tsn {

namespace {

// One step of `stepper` on tensor inputs (idx [B,T], pos [B], lengths [B], int64 on the CPU);
// its logits copied into a float32 CPU tensor.
at::Tensor StepLogits(Stepper& stepper, const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) {
  const at::Tensor tokens = idx.contiguous(), positions = pos.contiguous(), counts = lengths.contiguous();
  StepBatch batch(tokens.size(0), tokens.size(1));
  std::copy_n(tokens.data_ptr<int64_t>(), tokens.numel(), batch.tokens.data());
  std::copy_n(positions.data_ptr<int64_t>(), batch.slots, batch.positions.data());
  std::copy_n(counts.data_ptr<int64_t>(), batch.slots, batch.lengths.data());
  return LogitsTensor(*stepper.Step(batch));
}

// Seconds of a short serving-shaped workload on `stepper`: 8 rows prefill 16 tokens each in
// one step, then decode 8 steps together; after `untimed` runs of it (TorchScript's profiling
// executor optimises its forward over the first calls; the native runtime's first run touches
// its cache and scratch memory for the first time: 7.6 s against 5.5 s for a 135M Q8_0 model
// on the baseline family). A run is stopped between two steps once it has taken more than its
// budget (`untimedBudget` for each untimed run, `budget` for the timed one): `stopped` then says
// so, and `seconds` is where it stood.
struct WorkloadTime {
  double seconds = 0;
  bool stopped = false;
};
constexpr double kUnbounded = std::numeric_limits<double>::infinity();
WorkloadTime TimeWorkload(Stepper& stepper, int untimed, double untimedBudget = kUnbounded, double budget = kUnbounded) {
  constexpr int64_t kRows = 8, kPrompt = 16, kSteps = 8;
  WorkloadTime time;
  for (int run = 0; run <= untimed; ++run) {
    const double limit = run < untimed ? untimedBudget : budget;
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    stepper.Begin(kRows);
    at::Tensor idx = at::tensor(ProbeTokens(kRows, kPrompt), at::kLong).view({kRows, kPrompt});
    at::Tensor pos = at::zeros({kRows}, at::kLong);
    at::Tensor lengths = at::full({kRows}, kPrompt, at::kLong);
    bool stopped = false;
    for (int64_t step = 0; step <= kSteps; ++step) {
      at::Tensor logits = StepLogits(stepper, idx, pos, lengths);
      pos = pos + lengths;
      idx = logits.to(at::kFloat).argmax(1, true);
      lengths = at::ones({kRows}, at::kLong);
      if (step < kSteps && elapsed() > limit) {
        stopped = true;
        break;
      }
    }
    stepper.End();
    time.seconds = elapsed();
    // An untimed run past its budget stops the timing too: the timed run would follow it.
    if (stopped || (run < untimed && time.seconds > limit)) {
      time.stopped = true;
      return time;
    }
  }
  return time;
}

std::shared_ptr<torch::jit::Module> FloatCopy(const LoadedModel& model) {
  auto copy = std::make_shared<torch::jit::Module>(model.module->clone());
  copy->to(at::kFloat);
  return copy;
}

// Appends `text` to a note of clauses separated by "; ".
void AddNote(std::string& note, const std::string& text) { note += (note.empty() ? "" : "; ") + text; }

// A quantized checkpoint's weights dequantized once for the TorchScript runtime, where
// SERVICE_TORCHSCRIPT_DEQUANTIZE asks for it ("auto": on a GPU), saying so in `note` (a float
// checkpoint has no quantized module: nothing to do). Off the CPU nothing else reads the
// quantized rows, so they are released.
void DequantizeForScript(const LoadedModel& model, const RuntimeRequest& request, std::string& note) {
  if (ScriptDequantizesEveryCall(model.device.is_cpu(), request)) return;
  const Dequantized done = DequantizeOnce(*model.module, !model.device.is_cpu());
  if (done.modules > 0) {
    char text[160];
    std::snprintf(text, sizeof text, "it dequantized %lld quantized matrices once at load (%.1f MB)",
                  static_cast<long long>(done.modules), done.bytes / 1e6);
    AddNote(note, text);
  }
  if (done.unable > 0) {
    AddNote(note, std::to_string(done.unable) +
                      " quantized modules of this checkpoint dequantize on every call (exported before modules could hold "
                      "their weight dequantized: export it again to dequantize once)");
  }
}

// The TorchScript runtime's stepper (over a float32 copy of the module when it computes in
// float32; a quantized checkpoint's weights dequantized once where asked), saying so in `note`.
std::unique_ptr<ScriptStepper> MakeScriptStepper(const LoadedModel& model, const RuntimeRequest& request,
                                                 std::string& note) {
  DequantizeForScript(model, request, note);
  std::optional<bool> optimize;
  if (request.scriptOptimize != "auto") {
    optimize = request.scriptOptimize == "on";
    AddNote(note, std::string("torch's graph optimiser ") + (*optimize ? "on" : "off") + " (SERVICE_TORCHSCRIPT_OPTIMIZE)");
  }
  if (!ScriptWidens(model.device.is_cpu(), request)) {
    return std::make_unique<ScriptStepper>(model.module, model.device, request.dtype, request.kvBudgetBytes, optimize);
  }
  AddNote(note, std::string("it computes the ") + c10::toString(request.dtype) + " checkpoint in float32" +
                    (request.scriptCompute == "float32" ? "" : " (this CPU has no fast 16-bit matmuls)"));
  return std::make_unique<ScriptStepper>(FloatCopy(model), model.device, at::kFloat, request.kvBudgetBytes, optimize);
}

// The load-time check: the checkpoint's own forward on the probe (its 16-bit parameters
// widened to float32 in place for it, and narrowed back after), or the same logits as its
// export stored them (`stored` is then set); then the native stepper is built (`native`) from
// the module's weights and checked on the same tokens (CheckStepper).
CheckVerdict CheckNative(const LoadedModel& model, const RuntimeRequest& request, const NativeFactory& factory,
                         const KernelSet& kernels, const std::vector<int64_t>& cacheShape,
                         std::unique_ptr<Stepper>& native, PhaseClock& clock, bool& stored) {
  const bool sixteen = request.dtype != at::kFloat;
  // The reference logits come first, so nothing of the reference is alive while the native
  // weights are packed. A 16-bit checkpoint is checked against its forward run in float32
  // (kTolerance16) on the same weights: its parameters are widened in place for the probe
  // and narrowed back after it (exactly), so a float32 copy of the module is never held
  // beside them; torch's own widening ran at ~10 ns an element, most of the check's time.
  const Probe probe(cacheShape.at(4));
  ProbeSteps expected = StoredReferenceOf(model, request, probe);
  stored = !expected.empty();
  if (stored) {
    clock.Lap("stored reference");
  } else {
    {
      // The probe runs with torch's graph optimiser on, although one call needs no optimised
      // plan (profiling and optimising cost seconds of a 135M model's load): under torch 1.13 a
      // first call with the optimiser off left the module's forward failing an internal assert
      // once the TorchScript runtime later ran it optimised (llama.py's Linear modules).
      std::unique_ptr<WidenedParameters> widened;
      if (sixteen) widened = std::make_unique<WidenedParameters>(*model.module);
      if (sixteen) clock.Lap("widen");
      ScriptStepper reference(model.module, model.device, sixteen ? at::kFloat : request.dtype);
      expected = ReferenceLogits(reference, probe);
      clock.Lap("reference forward");
    }
    if (sixteen) clock.Lap("narrow");  // the parameters went back to 16 bits as `widened` ended
  }
  native = factory(NativeContext{WeightsOfModule(*model.module), request.fields, kernels, CheckThreads(request),
                                 request.kvBudgetBytes});
  clock.Lap("pack");
  return CheckStepper(*native, probe, expected, request, cacheShape, clock);
}

}  // namespace

namespace {
// How long the TorchScript forward's untimed first run may take before the timing stops it
// (its profiling executor's first calls cost more than later ones, but a first run past this
// would have to shrink several-fold to win).
double ScriptWarmupBudget(double nativeSeconds) { return 3 * nativeSeconds; }
}  // namespace

RuntimeChoice ChooseRuntime(LoadedModel& model, const RuntimeRequest& request) {
  if (request.runtime != "auto" && request.runtime != "native" && request.runtime != "torchscript") {
    throw CodedError(ErrorCode::kInvalidArgument, "runtime must be \"auto\", \"native\" or \"torchscript\"");
  }
  RuntimeChoice choice;
  PhaseClock clock(choice.phases);
  if (!model.module) {
    if (NativeFromArchive(model, request, choice, clock)) return choice;
    LoadModule(model);
    clock.Lap("archive");
  }
  if (request.runtime == "torchscript") {
    choice.note = "TorchScript runtime: asked for";
    choice.stepper = MakeScriptStepper(model, request, choice.note);
    choice.runtime = "torchscript";
    return choice;
  }

  std::string reason, checkNote;
  const NativeFactory factory = FindNativeStepper(request.architecture);
  if (!factory) {
    reason = "architecture \"" + request.architecture + "\" has no native runtime";
  } else if (!model.device.is_cpu()) {
    reason = "the native runtime is CPU-only; " + model.device.str() + " runs the TorchScript forward";
  } else {
    try {
      const KernelSet& kernels = SelectKernels(request.kernels);
      const std::vector<int64_t> cacheShape = model.module->run_method("cache_shape", int64_t{1}).toIntVector();
      const LoadCheckCache cache(model.digest.empty() ? "" : request.checkCacheDir,
                                 CheckKey(request, kernels.name, model.digest, ToleranceFor(request)));
      std::optional<CheckVerdict> verdict = request.forceCheck ? std::nullopt : cache.Find();
      // Where "auto" times the runtimes (NeedsTiming), the timing is remembered with the
      // verdict, for the TorchScript runtime's settings it ran with; a remembered verdict
      // without one (or with other settings) is timed again and remembered with it.
      // Where the TorchScript forward would hold the weights twice over or dequantize them on
      // every call, it is not timed (UntimedScript): native serves. DecisionUntimed gives the
      // choice wherever no timing is to run (a verdict this load makes carries no timing, so it
      // decides as no verdict does).
      const std::optional<RuntimeVerdict> untimed = DecisionUntimed(kernels.name, request, verdict);
      std::unique_ptr<Stepper> native;
      if (verdict) {
        checkNote = RememberedCheckNote(*verdict, cache);
        // A verdict remembered before verdicts carried the cache shape gains it, so that the
        // next load can build the native runtime without the module (NativeFromArchive).
        if (verdict->cacheShape.empty()) {
          verdict->cacheShape = cacheShape;
          std::string error;
          cache.Remember(*verdict, error);
        }
        // A remembered timing that chose the TorchScript runtime: nothing is packed.
        if (verdict->agrees && !(untimed && !untimed->native)) {
          native = factory(
              NativeContext{WeightsOfModule(*model.module), request.fields, kernels, request.threads, request.kvBudgetBytes});
          clock.Lap("pack");
        }
      } else {
        bool stored = false;
        verdict = CheckNative(model, request, factory, kernels, cacheShape, native, clock, stored);
        checkNote = RememberCheck(*verdict, cache, stored);
        if (!verdict->agrees) native.reset();  // the TorchScript runtime serves: its weights go first
      }
      if (verdict->agrees) {
        RuntimeVerdict decision;
        if (untimed) {
          decision = *untimed;
          if (!decision.native) {  // a remembered timing that chose TorchScript
            std::string note;
            choice.stepper = MakeScriptStepper(model, request, note);
            choice.runtime = "torchscript";
            choice.note = decision.reason + (note.empty() ? "" : "; " + note) + "; " + checkNote;
            return choice;
          }
        } else {
          std::string note;
          std::unique_ptr<ScriptStepper> candidate = MakeScriptStepper(model, request, note);
          RuntimeTimings timings;
          // One timed run each (the best of two took 34 s of a 135M Q8_0 model's first load on
          // this family; the margin in DecideRuntime absorbs the noise), the TorchScript one
          // after an untimed run: its profiling executor optimises on its first calls. The
          // native runtime has none to pay (ModelCore::Configure); its untimed run was 40 s of
          // a 1B Q8_0 first load.
          // The TorchScript runs stop once that runtime can no longer be chosen (ScriptBudget):
          // the choice is the same, and a first load no longer waits for the rest of them.
          timings.native = TimeWorkload(*native, 0).seconds;
          const WorkloadTime script =
              TimeWorkload(*candidate, 1, ScriptWarmupBudget(timings.native), ScriptBudget(timings.native));
          timings.script = script.seconds;
          timings.scriptStopped = script.stopped;
          clock.Lap("timing");
          decision = DecideRuntime(kernels.name, timings);
          verdict->timing = CheckTiming{ScriptSettings(request), timings.native, timings.script, timings.scriptStopped};
          std::string error;
          if (!cache.Remember(*verdict, error) && !error.empty()) {
            decision.reason += " (the timing could not be remembered: " + error + ")";
          }
          if (!decision.native) {
            choice.stepper = std::move(candidate);
            choice.runtime = "torchscript";
            choice.note = decision.reason + (note.empty() ? "" : "; " + note);
            choice.warm = true;
            return choice;
          }
          candidate.reset();
          ForgetDequantized(*model.module);  // the candidate's dense weights (SERVICE_TORCHSCRIPT_DEQUANTIZE=once)
        }
        choice.stepper = std::move(native);
        choice.runtime = "native";
        choice.kernels = kernels.name;
        choice.note = decision.reason + (checkNote.empty() ? "" : "; " + checkNote);
        return choice;
      }
      reason = "the native forward disagrees with the checkpoint's (relative logit difference " +
               std::to_string(verdict->disagreement) + ")" + (checkNote.empty() ? "" : "; " + checkNote);
    } catch (const CodedError& e) {
      reason = e.what();
    }
  }
  if (request.runtime == "native") throw CodedError(ErrorCode::kCheckpointInterface, "runtime \"native\" unavailable: " + reason);
  choice.note = "TorchScript runtime: " + reason;
  choice.stepper = MakeScriptStepper(model, request, choice.note);
  choice.runtime = "torchscript";
  return choice;
}

}  // namespace tsn
