// Logits a TorchScript forward returned, as a tensor on the model's device: on the CPU they are
// read in place (float32, contiguous); on an accelerator they stay there, and sampling runs on
// them with tensor ops (DrawOnDevice), one transfer back a step.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "steppers/Logits.h"

namespace tsn {

class TensorLogits final : public Logits {
 public:
  // `logits` [rows, vocab] of any floating dtype, on any device.
  explicit TensorLogits(const at::Tensor& logits);
  const float* host() const override;
  std::vector<float> HostRows(const std::vector<int64_t>& rows) const override;
  std::vector<int64_t> DrawOnDevice(const std::vector<Draw>& draws) const override;
  const at::Tensor& tensor() const { return tensor_; }

 private:
  at::Tensor tensor_;  // float32; contiguous on the CPU
};

// The rows of `logits` (all of them) as a float32 tensor [rows, vocab] on the CPU: the load-time
// check compares steps' logits with tensor ops.
at::Tensor LogitsTensor(const Logits& logits);

}  // namespace tsn
