// The native fast path for checkpoints of architecture "llama" (Llama 2/3, Mistral, Qwen2 and
// their cousins exported to the project's format; parameter names in docs/checkpoint.md):
// RMSNorm, rotary embeddings in Hugging Face's rotate-half convention (rope_theta, Llama 3.1's
// rope_scaling "llama3"), grouped-query attention, SwiGLU MLP, optional q/k/v biases, tied or
// untied head. Same design as GptStepper: weights packed once (float32, bf16 or fp16 as the
// checkpoint's dtype says, float32 accumulation), only real tokens computed, idle slots free,
// a ThreadTeam, and keys cached in dim-major tiles of 16 positions.
#pragma once

#include <torch/script.h>

#include <utility>
#include <vector>

#include "Kernels.h"
#include "Stepper.h"
#include "ThreadTeam.h"

namespace tsn {

class LlamaStepper : public Stepper {
 public:
  // Reads the weights by name from the module and the rotary settings from config.json;
  // throws CodedError(ERR_CHECKPOINT_INTERFACE) when they do not have the llama layout.
  explicit LlamaStepper(const NativeContext& context);

  void Begin(int64_t batch) override;
  at::Tensor Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) override;
  bool AddressableSlots() const override { return true; }
  // As many slots as fit in 256 MiB of cache (at least 8, at most 64).
  int64_t SlotBudget() const override;
  void End() override {}

 private:
  struct Layer {
    std::vector<float> attnNorm, mlpNorm;
    PackedLinear qkv, o, gateUp, down;  // q|k|v and gate|up fused
  };

  // Runs inside team_.Run: 5 phases per layer.
  void Layers(int member, int rows);
  // Rotates one head's q or k (hd floats) to position p, in place.
  void Rotate(float* head, int p) const;
  static int Chunks(const PackedLinear& w, int rows);
  static std::pair<int, int> Columns(const PackedLinear& w, int chunk, int rows);
  float* KeyTiles(int layer, int slot, int head) const;
  float* Values(int layer, int slot, int head) const;

  int layers_ = 0, heads_ = 0, kvHeads_ = 0, embd_ = 0, headDim_ = 0, hidden_ = 0, vocab_ = 0;
  int context_ = 0, contextPad_ = 0;
  const KernelSet& kernels_;
  float eps_ = 1e-6f;
  std::vector<float> embed_, norm_;
  std::vector<float> cos_, sin_;  // [context][headDim / 2]
  std::vector<Layer> blocks_;
  PackedLinear head_;
  ThreadTeam team_;

  // KV cache: keys [L][slot][KV][C'/16][hd][16], values [L][slot][KV][C'][hd].
  int slots_ = 0;
  AlignedFloats keys_, values_;

  struct Segment {
    int slot, firstRow, count, position;
  };
  std::vector<Segment> segments_;
  AlignedFloats x_, qkvOut_, attn_, gateUp_;
  std::vector<AlignedFloats> normed_, scratch_, act_;  // per team member
};

}  // namespace tsn
