// Stepper over the checkpoint's own TorchScript `forward`: works for any architecture that
// implements the serving interface, on any device. Its cache is one preallocated tensor
// whose rows (dimension 2) are addressable slots, as many as the memory budget holds, so
// jobs batch continuously as on the native runtime. A TorchScript forward computes every
// row it is given (padded to the widest), so a step never hands it the whole cache:
// decoding rows go in one call over the prefix of slots that ends at the highest busy one
// (a narrowed view of the cache, which the forward writes in place), and rows that feed a
// chunk of a prompt in calls of their own over their slots (adjacent ones together when
// padding costs little), so one long chunk does not pad every decoding row to its width.
// A quantized checkpoint's forward (modules with a `qtype`: it dequantizes every weight on
// every call) runs with TorchScript's graph optimiser off: optimising that graph cost 30 s of
// a 135M model's first two calls on the CPU (where nothing fuses, so the plan gained nothing)
// and 34 s plus seconds at every new input shape on CUDA (docs/benchmarks.md section 8).
// DequantizeOnce keeps each quantized module's weight dequantized instead (its `dense`
// attribute), so the forward's matmuls read float weights; the optimiser stays off for it too:
// on CUDA it spent 22-27 s of the first calls optimising a graph that still holds the
// dequantizing branches, and its steps were slower than unoptimised ones.
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>

#include "steppers/Stepper.h"

namespace tsn {

// What DequantizeOnce did: how many quantized modules now hold their weight dequantized, the
// bytes that took, and how many could not (a checkpoint exported before modules had `dense`).
struct Dequantized {
  int64_t modules = 0;
  int64_t bytes = 0;
  int64_t unable = 0;
};

// Sets `dense` to `dequantize()` on every quantized module of `module` (python/torchserve_node/
// quant.py) that does not have it yet. releaseQuantized: replace each such module's qweight by
// an empty tensor, so the weights are held once (only where nothing else reads them: the native
// runtime packs from qweight on the CPU).
Dequantized DequantizeOnce(torch::jit::Module& module, bool releaseQuantized);

// Undoes DequantizeOnce without releaseQuantized: every `dense` back to None.
void ForgetDequantized(torch::jit::Module& module);

class ScriptStepper : public Stepper {
 public:
  // kvBudgetBytes: memory for the cache; <= 0 picks the default (DefaultKvBudget).
  // optimize: whether forward runs through torch's graph optimiser; unset: on unless the
  // checkpoint is quantized (below).
  ScriptStepper(std::shared_ptr<torch::jit::Module> module, c10::Device device, c10::ScalarType cacheDtype,
                int64_t kvBudgetBytes = 0, std::optional<bool> optimize = std::nullopt);

  // Reuses the cache it already has when it holds `batch` rows (stale slots are never read:
  // docs/checkpoint.md section 1), so a model allocates it once.
  void Begin(int64_t batch) override;
  std::shared_ptr<const Logits> Step(const StepBatch& batch) override;
  bool AddressableSlots() const override { return true; }
  // The rows the memory budget holds (at least 1, at most kMaxSlots).
  int64_t SlotBudget() const override;
  // cache_shape(1) in the cache's dtype.
  int64_t CacheBytesPerRow() const override;
  void Keep(const std::vector<int64_t>& rows) override;
  // Shares a prompt's prefill among a request's n choices (Scheduler).
  bool CanCopyRows() const override { return true; }
  void CopyRow(int64_t from, int64_t to) override;
  // The cache's layout beyond its batch dimension is the checkpoint's own, so a prefix copy
  // copies the whole row.
  using Stepper::CopyRow;
  bool IdleSlotsCost() const override { return true; }
  // Keeps the cache for the next Begin; the destructor frees it.
  bool RetainsCache() const override { return true; }
  void End() override {}

  static constexpr int64_t kMaxSlots = 256;
  // The cache budget when none is configured: 256 MiB on the CPU (as the native runtime's
  // slots), half the device's free memory on CUDA (1 GiB when it cannot be read).
  static int64_t DefaultKvBudget(c10::Device device);

 private:
  // One forward call over slots [first, first + rows) with `lengths` (device tensors).
  at::Tensor Forward(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths, int64_t first,
                     int64_t rows);

  std::shared_ptr<torch::jit::Module> module_;
  c10::Device device_;
  c10::ScalarType cacheDtype_;
  int64_t kvBudgetBytes_;
  bool optimize_;  // false for a quantized checkpoint (above)
  mutable int64_t slotBudget_ = 0;  // computed once: free device memory shrinks once the cache exists
  at::Tensor cache_;  // [L, 2, B, H, C, hd]: batch is dimension 2
};

}  // namespace tsn
