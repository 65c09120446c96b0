#include "steppers/GptStepper.h"

#include <cmath>

#include "steppers/NativeRegistry.h"

namespace tsn {

GptStepper::GptStepper(const NativeContext& context) : DecoderStepper(context, "gpt") {
  const std::string gelu = context.fields.String("gelu", "tanh");
  if (gelu != "tanh" && gelu != "none") Mismatch("gelu must be \"tanh\" or \"none\"");
  gelu_ = gelu == "tanh" ? Epilogue::GeluTanh : Epilogue::GeluErf;
  const WeightType type = WeightTypeOf(context.fields.String("dtype", "float32"));
  if (!Has("wte.weight") || !Has("wpe.weight")) Mismatch("missing wte.weight or wpe.weight");
  const WeightView& wte = Need("wte.weight", {-1, -1});
  const int64_t vocab = wte.size(0), d = wte.size(1);
  const int64_t positions = Need("wpe.weight", {-1, d}).size(0);
  int layers = 0;
  while (Has("blocks." + std::to_string(layers) + ".ln_1.weight")) ++layers;
  if (layers == 0) Mismatch("no blocks.0");

  const std::vector<int64_t>& shape = context.weights.cacheShape;
  if (shape.size() != 6 || shape[0] != layers || shape[4] != positions) Mismatch("unexpected cache_shape(1)");
  heads_ = static_cast<int>(shape[3]);
  headDim_ = static_cast<int>(shape[5]);
  if (heads_ * headDim_ != d) Mismatch("heads * head_dim != n_embd");
  SetShape(layers, heads_, headDim_, static_cast<int>(d), static_cast<int>(vocab), static_cast<int>(positions), type);

  const auto pack = [&](const std::string& prefix, int64_t n, int64_t k) {
    return Pack(Need(prefix + ".weight", {n, k}), Has(prefix + ".bias") ? Floats(Need(prefix + ".bias", {n})) : std::vector<float>(),
                type);
  };
  wpe_ = Copy(Need("wpe.weight", {positions, d}));
  for (int l = 0; l < layers; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    Layer layer;
    layer.ln1Gamma = Copy(Need(p + ".ln_1.weight", {d}));
    layer.ln1Beta = Copy(Need(p + ".ln_1.bias", {d}));
    layer.ln2Gamma = Copy(Need(p + ".ln_2.weight", {d}));
    layer.ln2Beta = Copy(Need(p + ".ln_2.bias", {d}));
    layer.qkv = pack(p + ".attn.c_attn", 3 * d, d);
    layer.proj = pack(p + ".attn.c_proj", d, d);
    layer.fc = pack(p + ".mlp.c_fc", 4 * d, d);
    layer.out = pack(p + ".mlp.c_proj", d, 4 * d);
    blocks_.push_back(std::move(layer));
  }
  lnfGamma_ = Copy(Need("ln_f.weight", {d}));
  lnfBeta_ = Copy(Need("ln_f.bias", {d}));
  // A tied head (GPT-2's) is the token embedding table too (Embed reads its rows): held once.
  tied_ = !Has("lm_head.weight") || Shared(Need("lm_head.weight", {vocab, d}), wte);
  head_ = Pack(tied_ ? wte : Need("lm_head.weight", {vocab, d}), {}, type);
  if (!tied_) wte_ = Pack(wte, {}, type);
  DropWeights();
}

size_t GptStepper::LayerBytes() const {
  const Layer& b = blocks_[0];
  return b.qkv.bytes() + b.proj.bytes() + b.fc.bytes() + b.out.bytes();
}

void GptStepper::Reserve(int rows) {
  const size_t d = embd_;
  qkvOut_.Resize(rows * 3 * d);
  attn_.Resize(rows * d);
  hidden_.Resize(rows * 4 * d);
}

void GptStepper::Embed(int64_t token, int position, float* row) const {
  (tied_ ? head_ : wte_).Row(static_cast<int>(token), row);
  const float* pe = wpe_.data() + static_cast<size_t>(position) * embd_;
  for (int i = 0; i < embd_; ++i) row[i] += pe[i];
}

void GptStepper::FinalNorm(const float* x, float* out) const {
  kernels_.layerNormRows(x, 1, embd_, embd_, lnfGamma_.data(), lnfBeta_.data(), eps_, out, embd_);
}

void GptStepper::Layers(int member, int rows) {
  const int d = embd_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(headDim_));
  float* x = x_.get();
  float* qkv = qkvOut_.get();
  float* attn = attn_.get();
  float* hidden = hidden_.get();
  float* normed = normed_[member].get();
  float* scratch = scratch_[member].get();

  for (int l = 0; l < layers_; ++l) {
    const Layer& layer = blocks_[l];
    // A member normalises all rows itself before its first chunk: cheaper than a phase.
    bool ready = false;
    team_->Phase(member, Chunks(layer.qkv, rows), [&](int chunk) {
      if (!ready) {
        kernels_.layerNormRows(x, rows, d, d, layer.ln1Gamma.data(), layer.ln1Beta.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.qkv, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.qkv, qkv, 3 * d, p0, p1, Epilogue::Store);
    });

    team_->Phase(member, static_cast<int>(segments_.size()) * heads_, [&](int task) {
      const Segment& segment = segments_[task / heads_];
      const int h = task % heads_;
      for (int t = 0; t < segment.count; ++t) {
        const float* row = qkv + static_cast<size_t>(segment.firstRow + t) * 3 * d;
        cache_.Put(l, segment.slot, h, segment.position + t, row + d + h * headDim_, row + 2 * d + h * headDim_);
      }
      kernels_.attendHeads(qkv + static_cast<size_t>(segment.firstRow) * 3 * d + h * headDim_, 3 * d, 1, segment.count,
                          segment.position, cache_.Keys(l, segment.slot, h), cache_.Values(l, segment.slot, h),
                          cache_.type(), headDim_, scale, attn + static_cast<size_t>(segment.firstRow) * d + h * headDim_,
                          d, scratch);
    });

    team_->Phase(member, Chunks(layer.proj, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.proj, chunk, rows);
      kernels_.linearPanels(attn, rows, d, layer.proj, x, d, p0, p1, Epilogue::Accumulate);
    });

    ready = false;
    team_->Phase(member, Chunks(layer.fc, rows), [&](int chunk) {
      if (!ready) {
        kernels_.layerNormRows(x, rows, d, d, layer.ln2Gamma.data(), layer.ln2Beta.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.fc, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.fc, hidden, 4 * d, p0, p1, gelu_);
    });

    team_->Phase(member, Chunks(layer.out, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.out, chunk, rows);
      kernels_.linearPanels(hidden, rows, 4 * d, layer.out, x, d, p0, p1, Epilogue::Accumulate);
    });
  }
}

// The native stepper of config.json "architecture": "gpt".
const NativeRegistration kGptRegistration(
    "gpt", [](const NativeContext& context) -> std::unique_ptr<Stepper> { return std::make_unique<GptStepper>(context); },
    ArchiveModule{"__torch__.torchserve_node.gpt.GPT", "n_head"});

}  // namespace tsn
