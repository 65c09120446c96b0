#include "steppers/LlamaStepper.h"

#include <cmath>

#include "steppers/NativeRegistry.h"

namespace tsn {

// The checkpoint's own rotary inverse frequencies (llama.py's buffer rope_inv_freq, [head_dim / 2],
// any rope scaling already applied by the exporter): the native forward rotates exactly as the
// TorchScript forward does, and config.json's rope settings are not read a second time here.
std::vector<float> LlamaStepper::InverseFrequencies() const {
  if (!Has("rope_inv_freq")) {
    Mismatch("missing the buffer rope_inv_freq (the rotary frequencies of the forward; export the checkpoint with export_hf.py)");
  }
  return Floats(Need("rope_inv_freq", {headDim_ / 2}));
}

LlamaStepper::LlamaStepper(const NativeContext& context) : DecoderStepper(context, "llama") {
  const ModelFields& fields = context.fields;
  const WeightType type = WeightTypeOf(fields.String("dtype", "float32"));
  if (!HasMatrix("embed.weight")) Mismatch("missing embed.weight");
  const auto [vocab, d] = MatrixShape("embed.weight");
  int layers = 0;
  while (Has("layers." + std::to_string(layers) + ".attn_norm.weight")) ++layers;
  if (layers == 0) Mismatch("no layers.0");

  const std::vector<int64_t>& shape = context.weights.cacheShape;
  if (shape.size() != 6 || shape[0] != layers) Mismatch("unexpected cache_shape(1)");
  kvHeads_ = static_cast<int>(shape[3]);
  const int positions = static_cast<int>(shape[4]);
  headDim_ = static_cast<int>(shape[5]);
  if (headDim_ % 2 != 0) Mismatch("odd head_dim");
  if (!HasMatrix("layers.0.q_proj.weight")) Mismatch("missing layers.0.q_proj.weight");
  const int64_t qRows = MatrixShape("layers.0.q_proj.weight", d).first;
  heads_ = static_cast<int>(qRows / headDim_);
  if (heads_ * headDim_ != qRows || heads_ % kvHeads_ != 0) {
    Mismatch("q_proj rows are not a multiple of the kv heads");
  }
  if (!HasMatrix("layers.0.gate_proj.weight")) Mismatch("missing layers.0.gate_proj.weight");
  hidden_ = static_cast<int>(MatrixShape("layers.0.gate_proj.weight", d).first);
  eps_ = static_cast<float>(fields.Number("rms_norm_eps", 1e-6));
  SetShape(layers, kvHeads_, headDim_, static_cast<int>(d), static_cast<int>(vocab), positions, type);

  const int64_t qWidth = heads_ * headDim_, kvWidth = kvHeads_ * headDim_, hidden = hidden_;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attnNorm = Copy(Need(p + "attn_norm.weight", {d}));
    layer.mlpNorm = Copy(Need(p + "mlp_norm.weight", {d}));
    std::vector<float> bias;
    if (Has(p + "q_proj.bias")) {
      for (const auto& [part, width] : {std::pair<const char*, int64_t>{"q_proj.bias", qWidth}, {"k_proj.bias", kvWidth},
                                        {"v_proj.bias", kvWidth}}) {
        const std::vector<float> values = Floats(Need(p + part, {width}));
        bias.insert(bias.end(), values.begin(), values.end());
      }
    }
    layer.qkv = Stack({p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"}, {qWidth, kvWidth, kvWidth}, d,
                      bias, type);
    layer.o = Stack({p + "o_proj.weight"}, {d}, qWidth, {}, type);
    layer.gateUp = Stack({p + "gate_proj.weight", p + "up_proj.weight"}, {hidden, hidden}, d, {}, type);
    layer.down = Stack({p + "down_proj.weight"}, {d}, hidden, {}, type);
    blocks_.push_back(std::move(layer));
  }
  norm_ = Copy(Need("norm.weight", {d}));
  // A tied head is the embedding table too (Embed reads its rows, dequantizing a quantized
  // one): the table is held once. A quantized checkpoint ties by leaving lm_head out.
  const bool floatHead = Has("lm_head.weight") && Has("embed.weight");
  tied_ = !HasMatrix("lm_head.weight") ||
          (floatHead && Shared(Need("lm_head.weight", {vocab, d}), Need("embed.weight", {vocab, d})));
  head_ = Stack({tied_ ? "embed.weight" : "lm_head.weight"}, {vocab}, d, {}, type);
  if (!tied_) embed_ = Stack({"embed.weight"}, {vocab}, d, {}, type);
  const std::vector<float> inverse = InverseFrequencies();
  DropWeights();

  // cos/sin of every position, as the TorchScript forward computes them (float32 products).
  const size_t half = inverse.size();
  cos_.resize(static_cast<size_t>(context_) * half);
  sin_.resize(cos_.size());
  for (int p = 0; p < context_; ++p) {
    for (size_t i = 0; i < half; ++i) {
      // The product rounded to float32 as the forward rounds it; its cosine and sine rounded
      // from double, within the forward's own rounding of them (a unit in the last place).
      const double angle = static_cast<float>(p) * inverse[i];
      cos_[p * half + i] = static_cast<float>(std::cos(angle));
      sin_[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  Held(2 * cos_.size() * sizeof(float));
  act_.resize(team_->size());
}

size_t LlamaStepper::LayerBytes() const {
  const Layer& b = blocks_[0];
  return b.qkv.bytes() + b.o.bytes() + b.gateUp.bytes() + b.down.bytes();
}

void LlamaStepper::Reserve(int rows) {
  qkvOut_.Resize(static_cast<size_t>(rows) * blocks_[0].qkv.n());
  attn_.Resize(static_cast<size_t>(rows) * heads_ * headDim_);
  gateUp_.Resize(static_cast<size_t>(rows) * 2 * hidden_);
  for (auto& act : act_) act.Resize(static_cast<size_t>(rows) * hidden_);
}

void LlamaStepper::Embed(int64_t token, int, float* row) const {
  (tied_ ? head_ : embed_).Row(static_cast<int>(token), row);
}

void LlamaStepper::FinalNorm(const float* x, float* out) const {
  kernels_.rmsNormRows(x, 1, embd_, embd_, norm_.data(), eps_, out, embd_);
}

void LlamaStepper::Rotate(float* head, int p) const {
  const int half = headDim_ / 2;
  const float* c = cos_.data() + static_cast<size_t>(p) * half;
  const float* s = sin_.data() + static_cast<size_t>(p) * half;
  for (int i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * c[i] - b * s[i];
    head[i + half] = b * c[i] + a * s[i];
  }
}

void LlamaStepper::Layers(int member, int rows) {
  const int d = embd_, hd = headDim_, group = heads_ / kvHeads_;
  const int qkvWidth = blocks_[0].qkv.n(), attnWidth = heads_ * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* x = x_.get();
  float* qkv = qkvOut_.get();
  float* attn = attn_.get();
  float* gateUp = gateUp_.get();
  float* normed = normed_[member].get();
  float* scratch = scratch_[member].get();
  float* act = act_[member].get();

  for (int l = 0; l < layers_; ++l) {
    const Layer& layer = blocks_[l];
    // A member normalises all rows itself before its first chunk: cheaper than a phase.
    bool ready = false;
    team_->Phase(member, Chunks(layer.qkv, rows), [&](int chunk) {
      if (!ready) {
        kernels_.rmsNormRows(x, rows, d, d, layer.attnNorm.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.qkv, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.qkv, qkv, qkvWidth, p0, p1, Epilogue::Store);
    });

    // One task per (row's segment, kv head): rotates and caches that head's keys and values,
    // then the query heads sharing them rotate and attend.
    team_->Phase(member, static_cast<int>(segments_.size()) * kvHeads_, [&](int task) {
      const Segment& segment = segments_[task / kvHeads_];
      const int kv = task % kvHeads_;
      for (int t = 0; t < segment.count; ++t) {
        float* row = qkv + static_cast<size_t>(segment.firstRow + t) * qkvWidth;
        const int p = segment.position + t;
        float* k = row + attnWidth + kv * hd;
        const float* v = row + attnWidth + kvHeads_ * hd + kv * hd;
        Rotate(k, p);
        for (int h = kv * group; h < (kv + 1) * group; ++h) Rotate(row + h * hd, p);
        cache_.Put(l, segment.slot, kv, p, k, v);
      }
      kernels_.attendHeads(qkv + static_cast<size_t>(segment.firstRow) * qkvWidth + kv * group * hd, qkvWidth, group,
                           segment.count, segment.position, cache_.Keys(l, segment.slot, kv),
                           cache_.Values(l, segment.slot, kv), cache_.type(), hd, scale,
                           attn + static_cast<size_t>(segment.firstRow) * attnWidth + kv * group * hd, attnWidth, scratch);
    });

    team_->Phase(member, Chunks(layer.o, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.o, chunk, rows);
      kernels_.linearPanels(attn, rows, attnWidth, layer.o, x, d, p0, p1, Epilogue::Accumulate);
    });

    ready = false;
    team_->Phase(member, Chunks(layer.gateUp, rows), [&](int chunk) {
      if (!ready) {
        kernels_.rmsNormRows(x, rows, d, d, layer.mlpNorm.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.gateUp, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.gateUp, gateUp, 2 * hidden_, p0, p1, Epilogue::Store);
    });

    ready = false;
    team_->Phase(member, Chunks(layer.down, rows), [&](int chunk) {
      if (!ready) {
        kernels_.swiGlu(gateUp, rows, 2 * hidden_, hidden_, act, hidden_);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.down, chunk, rows);
      kernels_.linearPanels(act, rows, hidden_, layer.down, x, d, p0, p1, Epilogue::Accumulate);
    });
  }
}

// The native stepper of config.json "architecture": "llama".
const NativeRegistration kLlamaRegistration(
    "llama", [](const NativeContext& context) -> std::unique_ptr<Stepper> { return std::make_unique<LlamaStepper>(context); },
    ArchiveModule{"__torch__.torchserve_node.llama.LlamaLM", "n_kv_head"});

}  // namespace tsn
