#include "Runtime.h"

#include <algorithm>
#include <map>

#include "ErrorCodes.h"
#include "Errors.h"
#include "GptStepper.h"
#include "LlamaStepper.h"
#include "ScriptStepper.h"

namespace tsn {

namespace {

// Largest logit difference of the two steppers over a mixed prefill and a decode step,
// relative to the logits' size. Both get the same rows at different positions.
double Disagreement(Stepper& reference, Stepper& candidate, int64_t context) {
  const int64_t first = std::min<int64_t>(9, context - 2);
  const int64_t second = std::max<int64_t>(1, first / 2);
  at::Tensor idx = (at::arange(2 * first, at::kLong).view({2, first}) * 37 + 11).remainder(200);
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
constexpr double kTolerance32 = 1e-3;
constexpr double kTolerance16 = 2e-2;

template <typename T>
std::unique_ptr<Stepper> Make(const NativeContext& context) {
  return std::make_unique<T>(context);
}

// Architecture -> native CPU stepper.
const std::map<std::string, NativeFactory>& Registry() {
  static const std::map<std::string, NativeFactory> registry = {
      {"gpt", &Make<GptStepper>},
      {"llama", &Make<LlamaStepper>},
  };
  return registry;
}

}  // namespace

std::vector<std::string> NativeArchitectures() {
  std::vector<std::string> names;
  for (const auto& entry : Registry()) names.push_back(entry.first);
  return names;
}

RuntimeChoice ChooseRuntime(const LoadedModel& model, const RuntimeRequest& request) {
  if (request.runtime != "auto" && request.runtime != "native" && request.runtime != "torchscript") {
    throw CodedError(ErrorCode::kInvalidArgument, "runtime must be \"auto\", \"native\" or \"torchscript\"");
  }
  RuntimeChoice choice;
  auto script = std::make_unique<ScriptStepper>(model.module, model.device, request.dtype, request.kvBudgetBytes);
  if (request.runtime == "torchscript") {
    choice.stepper = std::move(script);
    choice.runtime = "torchscript";
    return choice;
  }

  std::string reason;
  const auto factory = Registry().find(request.architecture);
  if (factory == Registry().end()) {
    reason = "architecture \"" + request.architecture + "\" has no native runtime";
  } else if (!model.device.is_cpu()) {
    reason = "the native runtime is CPU-only; " + model.device.str() + " runs the TorchScript forward";
  } else {
    try {
      const KernelSet& kernels = SelectKernels(request.kernels);
      auto native = factory->second(NativeContext{*model.module, request.fields, kernels, request.threads, request.kvBudgetBytes});
      const int64_t context = model.module->run_method("cache_shape", int64_t{1}).toIntVector().at(4);
      const bool sixteen = request.dtype != at::kFloat;
      std::unique_ptr<ScriptStepper> wide;
      if (sixteen) {
        auto copy = std::make_shared<torch::jit::Module>(model.module->clone());
        copy->to(at::kFloat);
        wide = std::make_unique<ScriptStepper>(copy, model.device, at::kFloat);
      }
      const double disagreement = Disagreement(sixteen ? *wide : *script, *native, context);
      if (disagreement <= (sixteen ? kTolerance16 : kTolerance32)) {
        choice.stepper = std::move(native);
        choice.runtime = "native";
        choice.kernels = kernels.name;
        return choice;
      }
      reason = "the native forward disagrees with the checkpoint's (relative logit difference " +
               std::to_string(disagreement) + ")";
    } catch (const CodedError& e) {
      reason = e.what();
    }
  }
  if (request.runtime == "native") throw CodedError(ErrorCode::kCheckpointInterface, "runtime \"native\" unavailable: " + reason);
  choice.stepper = std::move(script);
  choice.runtime = "torchscript";
  choice.note = reason;
  return choice;
}

}  // namespace tsn
