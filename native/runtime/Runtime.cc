#include "runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "steppers/NativeRegistry.h"
#include "steppers/ScriptStepper.h"

namespace tsn {

namespace {

// Prompt tokens for the load-time checks: [rows, length] ids spread over 0..199.
at::Tensor ProbeTokens(int64_t rows, int64_t length) {
  return (at::arange(rows * length, at::kLong).view({rows, length}) * 37 + 11).remainder(200);
}

// Largest logit difference of the two steppers over a mixed prefill and a decode step,
// relative to the logits' size. Both get the same rows at different positions.
double Disagreement(Stepper& reference, Stepper& candidate, int64_t context) {
  const int64_t first = std::min<int64_t>(9, context - 2);
  const int64_t second = std::max<int64_t>(1, first / 2);
  at::Tensor idx = ProbeTokens(2, first);
  at::Tensor pos = at::zeros({2}, at::kLong);
  at::Tensor lengths = at::tensor(std::vector<int64_t>{first, second}, at::kLong);
  double worst = 0;
  reference.Begin(2);
  candidate.Begin(2);
  for (int step = 0; step < 2; ++step) {
    at::Tensor a = reference.Step(idx, pos, lengths).to(at::kCPU).to(at::kFloat);
    at::Tensor b = candidate.Step(idx, pos, lengths).to(at::kCPU).to(at::kFloat);
    const double scale = std::max(1.0, a.abs().max().item<double>());
    worst = std::max(worst, (a - b).abs().max().item<double>() / scale);
    pos = pos + lengths;
    idx = a.argmax(1, true);
    lengths = at::ones({2}, at::kLong);
  }
  reference.End();
  candidate.End();
  return worst;
}

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
// quantizes the activations to 8 bits per block of 32 (as llama.cpp does; relative error up
// to 2^-8 per input), which moves logits by a few percent of their largest magnitude at most.
constexpr double kTolerance32 = 1e-3;
constexpr double kTolerance16 = 2e-2;
constexpr double kToleranceQuantized = 5e-2;

// Seconds of a short serving-shaped workload on `stepper` (the best of two, after a first
// untimed run): 8 rows prefill 16 tokens each in one step, then decode 8 steps together.
double TimeWorkload(Stepper& stepper) {
  constexpr int64_t kRows = 8, kPrompt = 16, kSteps = 8;
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    stepper.Begin(kRows);
    at::Tensor idx = ProbeTokens(kRows, kPrompt);
    at::Tensor pos = at::zeros({kRows}, at::kLong);
    at::Tensor lengths = at::full({kRows}, kPrompt, at::kLong);
    for (int64_t step = 0; step <= kSteps; ++step) {
      at::Tensor logits = stepper.Step(idx, pos, lengths).to(at::kCPU);
      pos = pos + lengths;
      idx = logits.to(at::kFloat).argmax(1, true);
      lengths = at::ones({kRows}, at::kLong);
    }
    stepper.End();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run > 0) best = std::min(best, seconds);
  }
  return best;
}

// Whether the TorchScript runtime computes this checkpoint in float32: a 16-bit checkpoint on
// a CPU without fast 16-bit matmuls does (float16 has no CPU matmul kernels in torch 1.13 at
// all), unless SERVICE_TORCHSCRIPT_COMPUTE asks otherwise.
bool ScriptWidens(const LoadedModel& model, const RuntimeRequest& request) {
  if (request.dtype == at::kFloat || !model.device.is_cpu()) return false;
  if (request.scriptCompute == "float32") return true;
  return request.scriptCompute == "auto" && (request.dtype == at::kHalf || !FastBf16Matmul());
}

std::shared_ptr<torch::jit::Module> FloatCopy(const LoadedModel& model) {
  auto copy = std::make_shared<torch::jit::Module>(model.module->clone());
  copy->to(at::kFloat);
  return copy;
}

// The TorchScript runtime's stepper (over `wide`, a float32 copy of the module, when it
// computes in float32 and one was already made), saying so in `note`.
std::unique_ptr<ScriptStepper> MakeScriptStepper(const LoadedModel& model, const RuntimeRequest& request,
                                                 std::string& note, std::shared_ptr<torch::jit::Module> wide = nullptr) {
  if (!ScriptWidens(model, request)) {
    return std::make_unique<ScriptStepper>(model.module, model.device, request.dtype, request.kvBudgetBytes);
  }
  note += std::string(note.empty() ? "" : "; ") + "it computes the " + c10::toString(request.dtype) +
          " checkpoint in float32" + (request.scriptCompute == "float32" ? "" : " (this CPU has no fast 16-bit matmuls)");
  return std::make_unique<ScriptStepper>(wide ? wide : FloatCopy(model), model.device, at::kFloat, request.kvBudgetBytes);
}

}  // namespace

bool FastBf16Matmul() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
}

bool NeedsTiming(const std::string& family) { return family == "baseline"; }

RuntimeVerdict DecideRuntime(const std::string& family, const RuntimeTimings& timings) {
  if (!NeedsTiming(family)) {
    return {true, "native runtime, " + family +
                      " kernels: 1.3-12x the TorchScript forward's decode at every batch size on this family, "
                      "and at par or ahead in prefill"};
  }
  // The TorchScript forward serves only when clearly faster: timings at load move by a few
  // percent with the neighbours, and a wrong flip to it costs more than one to native.
  constexpr double kMargin = 1.2;
  char figures[160];
  std::snprintf(figures, sizeof figures, "a short workload took %.1f ms native (%s kernels), %.1f ms TorchScript",
                timings.native * 1e3, family.c_str(), timings.script * 1e3);
  if (timings.native > 0 && timings.script > 0 && timings.script * kMargin < timings.native) {
    return {false, std::string("TorchScript runtime: ") + figures};
  }
  return {true, std::string("native runtime: ") + figures};
}

RuntimeChoice ChooseRuntime(const LoadedModel& model, const RuntimeRequest& request) {
  if (request.runtime != "auto" && request.runtime != "native" && request.runtime != "torchscript") {
    throw CodedError(ErrorCode::kInvalidArgument, "runtime must be \"auto\", \"native\" or \"torchscript\"");
  }
  RuntimeChoice choice;
  if (request.runtime == "torchscript") {
    choice.note = "TorchScript runtime: asked for";
    choice.stepper = MakeScriptStepper(model, request, choice.note);
    choice.runtime = "torchscript";
    return choice;
  }

  std::string reason;
  const NativeFactory factory = FindNativeStepper(request.architecture);
  if (!factory) {
    reason = "architecture \"" + request.architecture + "\" has no native runtime";
  } else if (!model.device.is_cpu()) {
    reason = "the native runtime is CPU-only; " + model.device.str() + " runs the TorchScript forward";
  } else {
    try {
      const KernelSet& kernels = SelectKernels(request.kernels);
      auto native = factory(NativeContext{*model.module, request.fields, kernels, request.threads, request.kvBudgetBytes});
      const int64_t context = model.module->run_method("cache_shape", int64_t{1}).toIntVector().at(4);
      const bool sixteen = request.dtype != at::kFloat;
      // 16-bit checkpoints are checked against their forward run in float32 (kTolerance16).
      std::shared_ptr<torch::jit::Module> wideModule = sixteen ? FloatCopy(model) : nullptr;
      auto reference = sixteen ? std::make_unique<ScriptStepper>(wideModule, model.device, at::kFloat)
                               : std::make_unique<ScriptStepper>(model.module, model.device, request.dtype, request.kvBudgetBytes);
      const double disagreement = Disagreement(*reference, *native, context);
      const bool quantized = !request.fields.String("quantization", "").empty();
      if (disagreement <= (quantized ? kToleranceQuantized : sixteen ? kTolerance16 : kTolerance32)) {
        RuntimeVerdict verdict;
        if (request.runtime == "native") {
          verdict.reason = "native runtime, " + std::string(kernels.name) + " kernels: asked for";
        } else if (!NeedsTiming(kernels.name)) {
          verdict = DecideRuntime(kernels.name, RuntimeTimings{});
        } else {
          std::string note;
          std::unique_ptr<ScriptStepper> candidate = sixteen ? MakeScriptStepper(model, request, note, wideModule)
                                                             : std::move(reference);
          reference.reset();
          RuntimeTimings timings;
          timings.native = TimeWorkload(*native);
          timings.script = TimeWorkload(*candidate);
          verdict = DecideRuntime(kernels.name, timings);
          if (!verdict.native) {
            choice.stepper = std::move(candidate);
            choice.runtime = "torchscript";
            choice.note = verdict.reason + (note.empty() ? "" : "; " + note);
            return choice;
          }
        }
        choice.stepper = std::move(native);
        choice.runtime = "native";
        choice.kernels = kernels.name;
        choice.note = verdict.reason;
        return choice;
      }
      reason = "the native forward disagrees with the checkpoint's (relative logit difference " +
               std::to_string(disagreement) + ")";
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
