// The native fast path for checkpoints of architecture "gpt" (python/torchserve_node/gpt.py and
// the nanoGPT / GPT-2 exports): the same forward as the checkpoint's TorchScript (LayerNorm,
// learned positions, fused qkv with biases, GELU MLP), computed by Kernels.cc with weights
// packed once at configure time; the step itself is DecoderStepper's.
#pragma once

#include <vector>

#include "steppers/DecoderStepper.h"

namespace tsn {

class GptStepper : public DecoderStepper {
 public:
  // Reads the weights by name from the module; throws CodedError(ERR_CHECKPOINT_INTERFACE) when
  // they do not have the gpt layout. config.json "gelu": "tanh" (default) or "none" (exact).
  explicit GptStepper(const NativeContext& context);

 private:
  struct Layer {
    std::vector<float> ln1Gamma, ln1Beta, ln2Gamma, ln2Beta;
    PackedLinear qkv, proj, fc, out;
  };

  std::vector<PackedLinear*> Products() override {
    return LayerProducts(blocks_, tied_, &Layer::qkv, &Layer::proj, &Layer::fc, &Layer::out);
  }
  void Reserve(int rows) override;
  void Embed(int64_t token, int position, float* row) const override;
  void Layers(int member, int rows) override;
  void FinalNorm(const float* x, float* out) const override;
  int PhasesPerLayer() const override { return 5; }
  size_t LayerBytes() const override;

  int heads_ = 0, headDim_ = 0;
  Epilogue gelu_ = Epilogue::GeluTanh;
  float eps_ = 1e-5f;
  bool tied_ = true;   // the head is the token embedding table
  PackedLinear wte_;   // the token embedding table when the head is not tied to it
  std::vector<float> wpe_, lnfGamma_, lnfBeta_;
  std::vector<Layer> blocks_;
  AlignedFloats qkvOut_, attn_, hidden_;  // activations of one step
};

}  // namespace tsn
