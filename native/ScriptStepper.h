// Stepper over the checkpoint's own TorchScript `forward`: works for any architecture that
// implements the serving interface.
#pragma once

#include <torch/script.h>

#include <memory>

#include "Stepper.h"

namespace tsn {

class ScriptStepper : public Stepper {
 public:
  ScriptStepper(std::shared_ptr<torch::jit::Module> module, c10::Device device, c10::ScalarType cacheDtype);

  void Begin(int64_t batch) override;
  at::Tensor Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) override;
  void Keep(const at::Tensor& rows) override;
  bool CanCopyRows() const override { return true; }
  void CopyRow(int64_t from, int64_t to) override;
  void End() override;

 private:
  std::shared_ptr<torch::jit::Module> module_;
  c10::Device device_;
  c10::ScalarType cacheDtype_;
  at::Tensor cache_;  // [L, 2, B, H, C, hd]: batch is dimension 2
};

}  // namespace tsn
