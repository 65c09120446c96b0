// The native fast path for checkpoints of architecture "llama" (Llama 2/3, Mistral, Qwen2 and
// their cousins exported to the project's format; parameter names in docs/checkpoint.md):
// RMSNorm, rotary embeddings in Hugging Face's rotate-half convention at the checkpoint's own
// frequencies (rope_inv_freq, any rope scaling included), grouped-query attention, SwiGLU MLP,
// optional q/k/v biases, tied or untied head. Weights packed once (float32, bf16 or fp16 as the
// checkpoint's dtype says, float32 accumulation); the step itself is DecoderStepper's.
#pragma once

#include <vector>

#include "steppers/DecoderStepper.h"

namespace tsn {

class LlamaStepper : public DecoderStepper {
 public:
  // Reads the weights and the rotary frequencies by name from the module, the norm epsilon from
  // config.json; throws CodedError(ERR_CHECKPOINT_INTERFACE) when they lack the llama layout.
  explicit LlamaStepper(const NativeContext& context);

 private:
  struct Layer {
    std::vector<float> attnNorm, mlpNorm;
    PackedLinear qkv, o, gateUp, down;  // q|k|v and gate|up fused
  };

  std::vector<PackedLinear*> Products() override {
    return LayerProducts(blocks_, tied_, &Layer::qkv, &Layer::o, &Layer::gateUp, &Layer::down);
  }
  void Reserve(int rows) override;
  void Members(int members) override { act_.resize(static_cast<size_t>(members)); }
  void Embed(int64_t token, int position, float* row) const override;
  void Layers(int member, int rows) override;
  void FinalNorm(const float* x, float* out) const override;
  int PhasesPerLayer() const override { return 5; }
  size_t LayerBytes() const override;
  // The checkpoint's rope_inv_freq buffer as float32 [headDim / 2].
  std::vector<float> InverseFrequencies() const;
  // Rotates one head's q or k (hd floats) to position p, in place.
  void Rotate(float* head, int p) const;

  int heads_ = 0, kvHeads_ = 0, headDim_ = 0, hidden_ = 0;
  float eps_ = 1e-6f;
  bool tied_ = true;       // the head is the embedding table
  PackedLinear embed_;     // the embedding table when the head is not tied to it
  std::vector<float> norm_;
  std::vector<float> cos_, sin_;  // [context][headDim / 2]
  std::vector<Layer> blocks_;
  AlignedFloats qkvOut_, attn_, gateUp_;  // activations of one step
  std::vector<AlignedFloats> act_;        // per team member
};

}  // namespace tsn
