// The native fast path for checkpoints of architecture "gpt" (scripts/model/gpt.py and the
// nanoGPT / GPT-2 exports): the same forward as the checkpoint's TorchScript, computed by
// Kernels.cc on a ThreadTeam with weights packed once at configure time. Only real tokens
// are computed (no padding rows), idle slots cost nothing (so jobs can share the cache and
// batch continuously), and the KV cache keeps keys in dim-major tiles of 16 positions so
// attention scores 16 keys from one contiguous tile with no horizontal sums.
#pragma once

#include <torch/script.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "Kernels.h"
#include "Stepper.h"
#include "ThreadTeam.h"

namespace tsn {

class GptStepper : public Stepper {
 public:
  // Reads the weights by name from the module; throws CodedError(ERR_CHECKPOINT_INTERFACE) when
  // they do not have the gpt layout. config.json "gelu": "tanh" (default) or "none" (exact).
  explicit GptStepper(const NativeContext& context);

  void Begin(int64_t batch) override;
  at::Tensor Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) override;
  bool AddressableSlots() const override { return true; }
  // As many slots as fit in 256 MiB of cache (at least 8, at most 64).
  int64_t SlotBudget() const override;
  bool CanCopyRows() const override { return true; }
  void CopyRow(int64_t from, int64_t to) override;
  void End() override {}

 private:
  struct Layer {
    std::vector<float> ln1Gamma, ln1Beta, ln2Gamma, ln2Beta;
    PackedLinear qkv, proj, fc, out;
  };

  // Runs inside team_.Run: 5 phases per layer.
  void Layers(int member, int rows);
  // Chunks of a matrix product (the unit a team member takes) in a step of `rows` rows: pairs
  // of 16-column panels when a team splits the step; eight panels when the inference thread
  // runs it alone, which a one-row step streams four at once (LinearPanels).
  static int ChunkPanels(int rows);
  static int Chunks(const PackedLinear& w, int rows);
  static std::pair<int, int> Columns(const PackedLinear& w, int chunk, int rows);
  float* KeyTiles(int layer, int slot, int head) const;
  float* Values(int layer, int slot, int head) const;

  int layers_ = 0, heads_ = 0, embd_ = 0, headDim_ = 0, vocab_ = 0, context_ = 0, contextPad_ = 0;
  const KernelSet& kernels_;
  Epilogue gelu_ = Epilogue::GeluTanh;
  float eps_ = 1e-5f;
  std::vector<float> wte_, wpe_, lnfGamma_, lnfBeta_;
  std::vector<Layer> blocks_;
  PackedLinear head_;
  ThreadTeam team_;

  // KV cache: keys [L][slot][H][C'/16][hd][16] (tiles of 16 positions, dim-major), values
  // [L][slot][H][C'][hd]; C' is the context rounded up to 16.
  int slots_ = 0;
  AlignedFloats keys_, values_;

  // Activations of one step, for `rows` real tokens packed slot by slot.
  struct Segment {
    int slot, firstRow, count, position;
  };
  std::vector<Segment> segments_;
  AlignedFloats x_, qkvOut_, attn_, hidden_;
  std::vector<AlignedFloats> normed_, scratch_;  // per team member
};

}  // namespace tsn
