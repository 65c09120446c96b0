#include "ScriptStepper.h"

#include "ErrorCodes.h"
#include "Errors.h"

namespace tsn {

ScriptStepper::ScriptStepper(std::shared_ptr<torch::jit::Module> module, c10::Device device,
                             c10::ScalarType cacheDtype)
    : module_(std::move(module)), device_(device), cacheDtype_(cacheDtype) {}

void ScriptStepper::Begin(int64_t batch) {
  const auto shape = module_->run_method("cache_shape", batch).toIntVector();
  if (shape.size() < 3 || shape[2] != batch) {
    throw CodedError(ErrorCode::kCheckpointInterface,
                     "cache_shape(B) must return a shape whose third dimension is B");
  }
  cache_ = at::zeros(shape, at::TensorOptions().device(device_).dtype(cacheDtype_));
}

at::Tensor ScriptStepper::Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) {
  auto out = module_->forward({idx.to(device_), pos.to(device_), lengths.to(device_), cache_});
  if (!out.isTuple() || out.toTupleRef().elements().size() != 2) {
    throw CodedError(ErrorCode::kCheckpointInterface, "forward must return (logits, cache)");
  }
  const auto& elements = out.toTupleRef().elements();
  cache_ = elements[1].toTensor();
  return elements[0].toTensor();
}

void ScriptStepper::Keep(const at::Tensor& rows) { cache_ = cache_.index_select(2, rows.to(device_)); }

void ScriptStepper::CopyRow(int64_t from, int64_t to) { cache_.select(2, to).copy_(cache_.select(2, from)); }

void ScriptStepper::End() { cache_ = at::Tensor(); }

}  // namespace tsn
