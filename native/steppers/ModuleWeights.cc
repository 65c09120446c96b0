#include "steppers/ModuleWeights.h"

#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

namespace {

WeightView ViewOf(const at::Tensor& value) {
  at::Tensor tensor = value.detach().to(at::kCPU).contiguous();
  WeightView view;
  switch (tensor.scalar_type()) {
    case at::kFloat: view.dtype = WeightDtype::F32; break;
    case at::kBFloat16: view.dtype = WeightDtype::BF16; break;
    case at::kHalf: view.dtype = WeightDtype::F16; break;
    case at::kByte: view.dtype = WeightDtype::U8; break;
    default:
      tensor = tensor.to(at::kFloat);
      view.dtype = WeightDtype::F32;
  }
  view.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  view.data = tensor.data_ptr();
  view.owner = std::make_shared<at::Tensor>(std::move(tensor));
  return view;
}

[[noreturn]] void Wrong(const std::string& what) {
  throw CodedError(ErrorCode::kCheckpointInterface, "not a parameter layout the native runtime reads: " + what);
}

}  // namespace

CheckpointWeights WeightsOfModule(const torch::jit::Module& module) {
  CheckpointWeights weights;
  for (const auto& p : module.named_parameters(true)) weights.tensors[p.name] = ViewOf(p.value);
  for (const auto& b : module.named_buffers(true)) {
    if (b.value.defined() && b.value.is_floating_point()) weights.tensors.emplace(b.name, ViewOf(b.value));
  }
  for (const auto& m : module.named_modules()) {
    if (!m.value.hasattr("qtype") || !m.value.hasattr("qweight")) continue;
    const std::string name = (m.name.empty() ? "" : m.name + ".") + "weight";
    const c10::IValue qtype = m.value.attr("qtype");
    const c10::IValue rows = m.value.attr("qweight");
    if (!qtype.isString() || !rows.isTensor()) Wrong(name + ": qtype or qweight of the wrong kind");
    const char* width = m.value.hasattr("in_features") ? "in_features" : "embedding_dim";
    if (!m.value.hasattr(width) || !m.value.attr(width).isInt()) Wrong(name + ": no " + width);
    const at::Tensor& bytes = rows.toTensor();
    if (bytes.scalar_type() != at::kByte || bytes.dim() != 2 || !bytes.is_contiguous() || !bytes.device().is_cpu()) {
      Wrong(name + ": qweight is not uint8 [rows, row bytes] on the CPU");
    }
    weights.quantized[name] = {ViewOf(bytes), qtype.toStringRef(), m.value.attr(width).toInt()};
  }
  torch::jit::Module handle = module;  // run_method is not const
  weights.cacheShape = handle.run_method("cache_shape", int64_t{1}).toIntVector();
  return weights;
}

}  // namespace tsn
