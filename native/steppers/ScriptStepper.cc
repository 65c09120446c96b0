#include "steppers/ScriptStepper.h"

#include <algorithm>
#include <vector>

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "common/DeviceMemory.h"
#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "steppers/TensorLogits.h"

namespace tsn {

namespace {

bool IsQuantized(const torch::jit::Module& m) { return m.hasattr("qtype") && m.hasattr("qweight"); }

bool HasDense(const torch::jit::Module& m) { return m.hasattr("dense") && m.attr("dense").isTensor(); }

bool Quantized(const torch::jit::Module& module) {
  for (const auto& m : module.modules()) {
    if (IsQuantized(m)) return true;
  }
  return false;
}

}  // namespace

Dequantized DequantizeOnce(torch::jit::Module& module, bool releaseQuantized) {
  Dequantized done;
  // A one-off call: no plan worth optimising (see the header).
  torch::jit::GraphOptimizerEnabledGuard optimizer(false);
  for (auto m : module.modules()) {
    if (!IsQuantized(m) || HasDense(m)) continue;
    if (!m.hasattr("dense") || !m.find_method("dequantize")) {
      ++done.unable;
      continue;
    }
    const at::Tensor dense = m.run_method("dequantize").toTensor();
    m.setattr("dense", dense);
    if (releaseQuantized) {
      const at::Tensor quantized = m.attr("qweight").toTensor();
      m.register_buffer("qweight", at::empty({0, quantized.size(1)}, quantized.options()));
    }
    ++done.modules;
    done.bytes += dense.numel() * dense.element_size();
  }
  return done;
}

void ForgetDequantized(torch::jit::Module& module) {
  for (auto m : module.modules()) {
    if (IsQuantized(m) && HasDense(m)) m.setattr("dense", c10::IValue());
  }
}

ScriptStepper::ScriptStepper(std::shared_ptr<torch::jit::Module> module, c10::Device device,
                             c10::ScalarType cacheDtype, int64_t kvBudgetBytes, std::optional<bool> optimize)
    : module_(std::move(module)),
      device_(device),
      cacheDtype_(cacheDtype),
      kvBudgetBytes_(kvBudgetBytes),
      optimize_(optimize.value_or(!Quantized(*module_))) {}

int64_t ScriptStepper::DefaultKvBudget(c10::Device device) {
  if (device.is_cpu()) return 256LL << 20;
  const int64_t free = DeviceFreeBytes(device);
  return free > 0 ? free / 2 : (1LL << 30);
}

int64_t ScriptStepper::SlotBudget() const {
  if (slotBudget_ > 0) return slotBudget_;
  const int64_t budget = kvBudgetBytes_ > 0 ? kvBudgetBytes_ : DefaultKvBudget(device_);
  slotBudget_ = std::clamp<int64_t>(budget / CacheBytesPerRow(), 1, kMaxSlots);
  return slotBudget_;
}

int64_t ScriptStepper::CacheBytesPerRow() const {
  const auto shape = module_->run_method("cache_shape", int64_t{1}).toIntVector();
  int64_t perRow = c10::elementSize(cacheDtype_);
  for (int64_t n : shape) perRow *= std::max<int64_t>(1, n);
  return perRow;
}

void ScriptStepper::Begin(int64_t batch) {
  if (cache_.defined() && cache_.size(2) == batch) return;
  cache_ = at::Tensor();  // the old one goes before the new one is allocated
  const auto shape = module_->run_method("cache_shape", batch).toIntVector();
  if (shape.size() < 3 || shape[2] != batch) {
    throw CodedError(ErrorCode::kCheckpointInterface,
                     "cache_shape(B) must return a shape whose third dimension is B");
  }
  cache_ = at::zeros(shape, at::TensorOptions().device(device_).dtype(cacheDtype_));
}

at::Tensor ScriptStepper::Forward(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths,
                                  int64_t first, int64_t rows) {
  at::Tensor view = cache_.narrow(2, first, rows);
  // Thread-local, restored on return; the same for every call of this module, so a plan
  // made with the optimiser off is never mixed with an optimised one.
  torch::jit::GraphOptimizerEnabledGuard optimizer(optimize_);
  auto out = module_->forward({idx, pos, lengths, view});
  if (!out.isTuple() || out.toTupleRef().elements().size() != 2) {
    throw CodedError(ErrorCode::kCheckpointInterface, "forward must return (logits, cache)");
  }
  const auto& elements = out.toTupleRef().elements();
  const at::Tensor& written = elements[1].toTensor();
  // The interface writes in place; a forward that returns a new cache instead still works.
  if (!written.is_same(view)) view.copy_(written);
  return elements[0].toTensor();
}

std::shared_ptr<const Logits> ScriptStepper::Step(const StepBatch& batch) {
  const int64_t slots = batch.slots;
  const int64_t width = batch.width;
  if (!cache_.defined() || slots != cache_.size(2)) {
    throw CodedError(ErrorCode::kInference, "step batch does not match the cache");
  }
  const int64_t* count = batch.lengths.data();
  int64_t decodeEnd = 0;             // one past the highest slot that feeds a single token
  std::vector<int64_t> chunked;      // slots that feed more than one
  for (int64_t s = 0; s < slots; ++s) {
    if (count[s] == 1) decodeEnd = s + 1;
    if (count[s] > 1) chunked.push_back(s);
  }
  // One host-to-device copy for everything the calls take: idx | pos | lengths | decode lengths.
  at::Tensor packed = at::empty({slots, width + 3}, at::kLong);
  int64_t* rows = packed.data_ptr<int64_t>();
  for (int64_t s = 0; s < slots; ++s, rows += width + 3) {
    std::copy_n(batch.tokens.data() + s * width, width, rows);
    rows[width] = batch.positions[s];
    rows[width + 1] = count[s];
    rows[width + 2] = count[s] == 1 ? 1 : 0;
  }
  packed = Upload(packed, device_);
  const at::Tensor tokens = packed.narrow(1, 0, width);
  const at::Tensor positions = packed.select(1, width);
  const at::Tensor counts = packed.select(1, width + 1);
  const at::Tensor decodeCounts = packed.select(1, width + 2);

  // Logits for the slots up to the last one fed, not for every slot of the cache: the cache
  // holds up to kMaxSlots rows, and [kMaxSlots, vocabulary] fresh each step (131 MB in float32
  // at a 128,256-token vocabulary) cost a batch-1 decode step 20x its forward on the CPU.
  const int64_t used = std::max(decodeEnd, chunked.empty() ? int64_t{0} : chunked.back() + 1);
  at::Tensor logits;
  auto place = [&](const at::Tensor& out, int64_t first) {
    if (!logits.defined()) logits = at::empty({used, out.size(1)}, out.options());
    logits.narrow(0, first, out.size(0)).copy_(out);
  };
  if (decodeEnd > 0) {
    // Chunking rows inside the prefix feed nothing here (idle rows write nothing).
    const at::Tensor out = Forward(tokens.narrow(0, 0, decodeEnd).narrow(1, 0, 1), positions.narrow(0, 0, decodeEnd),
                                   decodeCounts.narrow(0, 0, decodeEnd), 0, decodeEnd);
    // A decode-only step (the usual one) returns the forward's own logits.
    if (chunked.empty()) return std::make_shared<TensorLogits>(out);
    place(out, 0);
  }
  // Rows feeding chunks: neighbouring slots share a call while padding them to the widest
  // costs at most twice their real tokens (a burst of new prompts lands in adjacent slots);
  // decoding rows between them feed nothing there.
  const at::Tensor chunkCounts = counts * (1 - decodeCounts);
  for (size_t i = 0; i < chunked.size();) {
    const int64_t first = chunked[i];
    int64_t last = first, widest = count[first], real = count[first];
    size_t j = i + 1;
    for (; j < chunked.size(); ++j) {
      const int64_t s = chunked[j];
      const int64_t wider = std::max(widest, count[s]);
      if ((s - first + 1) * wider > 2 * (real + count[s])) break;
      last = s;
      widest = wider;
      real += count[s];
    }
    const int64_t rows = last - first + 1;
    const at::Tensor out = Forward(tokens.narrow(0, first, rows).narrow(1, 0, widest), positions.narrow(0, first, rows),
                                   chunkCounts.narrow(0, first, rows), first, rows);
    if (rows == 1) {
      place(out, first);
    } else {
      // Only the chunk rows' logits: decoding rows in between got theirs from the decode call.
      if (!logits.defined()) logits = at::empty({used, out.size(1)}, out.options());
      for (size_t k = i; k < j; ++k) logits[chunked[k]].copy_(out[chunked[k] - first]);
    }
    i = j;
  }
  if (!logits.defined()) throw CodedError(ErrorCode::kInference, "a step needs at least one row that feeds a token");
  return std::make_shared<TensorLogits>(logits);
}

void ScriptStepper::Keep(const std::vector<int64_t>& rows) {
  cache_ = cache_.index_select(2, at::tensor(rows, at::kLong).to(device_));
}

void ScriptStepper::CopyRow(int64_t from, int64_t to) { cache_.select(2, to).copy_(cache_.select(2, from)); }

}  // namespace tsn
