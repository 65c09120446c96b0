#include "LlamaStepper.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ErrorCodes.h"
#include "Errors.h"

namespace tsn {

namespace {

using Weights = std::map<std::string, at::Tensor>;

// Fewest token rows in a step for which the whole team is worth waking (as GptStepper).
constexpr int kTeamRows = 4;

[[noreturn]] void Mismatch(const std::string& what) {
  throw CodedError(ErrorCode::kCheckpointInterface, "not the llama parameter layout for the native runtime: " + what);
}

const at::Tensor& Need(const Weights& weights, const std::string& name, std::vector<int64_t> shape) {
  auto it = weights.find(name);
  if (it == weights.end()) Mismatch("missing " + name);
  if (it->second.sizes().vec() != shape) Mismatch(name + " has shape " + c10::str(it->second.sizes()));
  return it->second;
}

std::vector<float> Copy(const at::Tensor& tensor) {
  const float* data = tensor.data_ptr<float>();
  return std::vector<float>(data, data + tensor.numel());
}

// Hugging Face's inverse frequencies (_compute_default_rope_parameters, and
// _compute_llama3_parameters for rope_scaling "llama3"), in float32 as transformers computes them.
at::Tensor InverseFrequencies(const ModelFields& fields, int headDim) {
  const double theta = fields.Number("rope_theta", 10000.0);
  at::Tensor inv = at::reciprocal(at::pow(theta, at::arange(0, headDim, 2, at::kLong).to(at::kFloat) / headDim));
  std::string type = fields.String("rope_scaling.rope_type", fields.String("rope_scaling.type", ""));
  if (type.empty() && fields.Has("rope_scaling.factor")) type = "?";
  if (type.empty() || type == "default") return inv;
  if (type != "llama3") Mismatch("rope_scaling type \"" + type + "\" (the native runtime implements \"llama3\")");
  for (const char* name : {"rope_scaling.factor", "rope_scaling.low_freq_factor", "rope_scaling.high_freq_factor",
                           "rope_scaling.original_max_position_embeddings"}) {
    if (!fields.Has(name)) Mismatch(std::string("config.json lacks ") + name);
  }
  const double factor = fields.Number("rope_scaling.factor", 1);
  const double low = fields.Number("rope_scaling.low_freq_factor", 1);
  const double high = fields.Number("rope_scaling.high_freq_factor", 4);
  const double old = fields.Number("rope_scaling.original_max_position_embeddings", 8192);
  const at::Tensor wavelen = (2 * M_PI) / inv;
  const at::Tensor scaled = at::where(wavelen > old / low, inv / factor, inv);
  const at::Tensor smooth = (old / wavelen - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = (wavelen < old / high).logical_not().logical_and((wavelen > old / low).logical_not());
  return at::where(medium, smoothed, scaled);
}

}  // namespace

LlamaStepper::LlamaStepper(const NativeContext& context) : kernels_(context.kernels), team_(context.threads) {
  const ModelFields& fields = context.fields;
  const WeightType type = WeightTypeOf(fields.String("dtype", "float32"));
  Weights weights;
  for (const auto& p : context.module.named_parameters(true)) {
    weights[p.name] = p.value.detach().to(at::kCPU).to(at::kFloat).contiguous();
  }
  if (!weights.count("embed.weight") || weights.at("embed.weight").dim() != 2) Mismatch("missing a 2-D embed.weight");
  const at::Tensor embed = weights.at("embed.weight");
  vocab_ = static_cast<int>(embed.size(0));
  embd_ = static_cast<int>(embed.size(1));
  while (weights.count("layers." + std::to_string(layers_) + ".attn_norm.weight")) ++layers_;
  if (layers_ == 0) Mismatch("no layers.0");

  torch::jit::Module handle = context.module;  // run_method is not const
  const auto shape = handle.run_method("cache_shape", int64_t{1}).toIntVector();
  if (shape.size() != 6 || shape[0] != layers_) Mismatch("unexpected cache_shape(1)");
  kvHeads_ = static_cast<int>(shape[3]);
  context_ = static_cast<int>(shape[4]);
  headDim_ = static_cast<int>(shape[5]);
  contextPad_ = (context_ + 15) / 16 * 16;
  if (headDim_ % 2 != 0) Mismatch("odd head_dim");
  const at::Tensor& q0 = Need(weights, "layers.0.q_proj.weight", {weights.at("layers.0.q_proj.weight").size(0), embd_});
  heads_ = static_cast<int>(q0.size(0) / headDim_);
  if (heads_ * headDim_ != q0.size(0) || heads_ % kvHeads_ != 0) Mismatch("q_proj rows are not a multiple of the kv heads");
  if (!weights.count("layers.0.gate_proj.weight")) Mismatch("missing layers.0.gate_proj.weight");
  hidden_ = static_cast<int>(weights.at("layers.0.gate_proj.weight").size(0));
  eps_ = static_cast<float>(fields.Number("rms_norm_eps", 1e-6));

  const int64_t d = embd_, qWidth = heads_ * headDim_, kvWidth = kvHeads_ * headDim_, hidden = hidden_;
  embed_ = Copy(embed);
  for (int l = 0; l < layers_; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer layer;
    layer.attnNorm = Copy(Need(weights, p + "attn_norm.weight", {d}));
    layer.mlpNorm = Copy(Need(weights, p + "mlp_norm.weight", {d}));
    const at::Tensor qkv = at::cat({Need(weights, p + "q_proj.weight", {qWidth, d}),
                                    Need(weights, p + "k_proj.weight", {kvWidth, d}),
                                    Need(weights, p + "v_proj.weight", {kvWidth, d})}).contiguous();
    at::Tensor bias;
    if (weights.count(p + "q_proj.bias")) {
      bias = at::cat({Need(weights, p + "q_proj.bias", {qWidth}), Need(weights, p + "k_proj.bias", {kvWidth}),
                      Need(weights, p + "v_proj.bias", {kvWidth})}).contiguous();
    }
    layer.qkv = PackedLinear(qkv.data_ptr<float>(), bias.defined() ? bias.data_ptr<float>() : nullptr,
                             static_cast<int>(qkv.size(0)), embd_, type);
    const at::Tensor& o = Need(weights, p + "o_proj.weight", {d, qWidth});
    layer.o = PackedLinear(o.data_ptr<float>(), nullptr, embd_, static_cast<int>(qWidth), type);
    const at::Tensor gateUp = at::cat({Need(weights, p + "gate_proj.weight", {hidden, d}),
                                       Need(weights, p + "up_proj.weight", {hidden, d})}).contiguous();
    layer.gateUp = PackedLinear(gateUp.data_ptr<float>(), nullptr, 2 * hidden_, embd_, type);
    const at::Tensor& down = Need(weights, p + "down_proj.weight", {d, hidden});
    layer.down = PackedLinear(down.data_ptr<float>(), nullptr, embd_, hidden_, type);
    blocks_.push_back(std::move(layer));
  }
  norm_ = Copy(Need(weights, "norm.weight", {d}));
  const at::Tensor& head = weights.count("lm_head.weight") ? Need(weights, "lm_head.weight", {vocab_, d}) : embed;
  head_ = PackedLinear(head.data_ptr<float>(), nullptr, vocab_, embd_, type);

  // cos/sin of every position, as the TorchScript forward computes them (float32 products).
  const at::Tensor freqs = at::arange(context_, at::kLong).to(at::kFloat).unsqueeze(1) *
                           InverseFrequencies(fields, headDim_).view({1, -1});
  cos_ = Copy(freqs.cos().contiguous());
  sin_ = Copy(freqs.sin().contiguous());

  normed_.resize(team_.size());
  scratch_.resize(team_.size());
  act_.resize(team_.size());
  for (auto& scratch : scratch_) scratch.Resize(contextPad_);
}

float* LlamaStepper::KeyTiles(int layer, int slot, int head) const {
  return keys_.get() + ((static_cast<size_t>(layer) * slots_ + slot) * kvHeads_ + head) * headDim_ * contextPad_;
}

float* LlamaStepper::Values(int layer, int slot, int head) const {
  return values_.get() + ((static_cast<size_t>(layer) * slots_ + slot) * kvHeads_ + head) * contextPad_ * headDim_;
}

void LlamaStepper::Begin(int64_t batch) {
  // Never read before written (attention only sees positions already fed), so not cleared.
  slots_ = static_cast<int>(batch);
  const size_t perCache = static_cast<size_t>(layers_) * slots_ * kvHeads_ * headDim_ * contextPad_;
  keys_.Resize(perCache);
  values_.Resize(perCache);
}

int64_t LlamaStepper::SlotBudget() const {
  const int64_t bytesPerSlot = 2LL * layers_ * kvHeads_ * headDim_ * contextPad_ * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>((256LL << 20) / bytesPerSlot, 8, 64);
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

at::Tensor LlamaStepper::Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) {
  const int slots = static_cast<int>(idx.size(0));
  if (slots != slots_) throw CodedError(ErrorCode::kInference, "step batch does not match the cache");
  auto tokens = idx.accessor<int64_t, 2>();
  auto positions = pos.accessor<int64_t, 1>();
  auto counts = lengths.accessor<int64_t, 1>();
  segments_.clear();
  int rows = 0;
  for (int s = 0; s < slots; ++s) {
    const int count = static_cast<int>(counts[s]);
    if (count <= 0) continue;
    const int position = static_cast<int>(positions[s]);
    if (position < 0 || position + count > context_) {
      throw CodedError(ErrorCode::kInference, "a row would pass the model's context length");
    }
    segments_.push_back({s, rows, count, position});
    rows += count;
  }
  at::Tensor logits = at::zeros({slots, vocab_}, at::kFloat);
  if (rows == 0) return logits;

  const size_t d = embd_;
  x_.Resize(rows * d);
  qkvOut_.Resize(static_cast<size_t>(rows) * blocks_[0].qkv.n());
  attn_.Resize(static_cast<size_t>(rows) * heads_ * headDim_);
  gateUp_.Resize(static_cast<size_t>(rows) * 2 * hidden_);
  const size_t normedRows = std::max<size_t>(rows, segments_.size());
  for (auto& normed : normed_) normed.Resize(normedRows * d);
  for (auto& act : act_) act.Resize(static_cast<size_t>(rows) * hidden_);
  AlignedFloats last;
  last.Resize(segments_.size() * vocab_);

  for (const Segment& segment : segments_) {
    for (int t = 0; t < segment.count; ++t) {
      const int64_t token = tokens[segment.slot][t];
      if (token < 0 || token >= vocab_) throw CodedError(ErrorCode::kInvalidArgument, "token id outside the vocabulary");
      std::memcpy(x_.get() + static_cast<size_t>(segment.firstRow + t) * d, embed_.data() + token * d, sizeof(float) * d);
    }
  }

  const int count = static_cast<int>(segments_.size());
  team_.Run(
      [&](int member) {
        Layers(member, rows);
        float* normed = normed_[member].get();
        bool ready = false;
        team_.Phase(member, Chunks(head_, rows), [&](int chunk) {
          if (!ready) {
            for (int j = 0; j < count; ++j) {
              const Segment& segment = segments_[j];
              kernels_.rmsNormRows(x_.get() + (segment.firstRow + segment.count - 1) * d, 1, embd_, embd_,
                                   norm_.data(), eps_, normed + j * d, embd_);
            }
            ready = true;
          }
          const auto [p0, p1] = Columns(head_, chunk, rows);
          kernels_.linearPanels(normed, count, embd_, head_, last.get(), vocab_, p0, p1, Epilogue::Store);
        });
      },
      5 * layers_ + 1, rows >= kTeamRows ? team_.size() : 1);
  float* out = logits.data_ptr<float>();
  for (int j = 0; j < count; ++j) {
    std::memcpy(out + static_cast<size_t>(segments_[j].slot) * vocab_, last.get() + static_cast<size_t>(j) * vocab_,
                sizeof(float) * vocab_);
  }
  return logits;
}

int LlamaStepper::Chunks(const PackedLinear& w, int rows) {
  const int width = rows >= kTeamRows ? 2 : 8;
  return (w.panels() + width - 1) / width;
}

std::pair<int, int> LlamaStepper::Columns(const PackedLinear& w, int chunk, int rows) {
  const int width = rows >= kTeamRows ? 2 : 8;
  return {width * chunk, std::min(width * (chunk + 1), w.panels())};
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
    team_.Phase(member, Chunks(layer.qkv, rows), [&](int chunk) {
      if (!ready) {
        kernels_.rmsNormRows(x, rows, d, d, layer.attnNorm.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.qkv, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.qkv, qkv, qkvWidth, p0, p1, Epilogue::Store);
    });

    // One task per (row's segment, kv head): rotates and caches that head's keys and values,
    // then the query heads sharing them rotate and attend.
    team_.Phase(member, static_cast<int>(segments_.size()) * kvHeads_, [&](int task) {
      const Segment& segment = segments_[task / kvHeads_];
      const int kv = task % kvHeads_;
      float* keys = KeyTiles(l, segment.slot, kv);
      float* values = Values(l, segment.slot, kv);
      for (int t = 0; t < segment.count; ++t) {
        float* row = qkv + static_cast<size_t>(segment.firstRow + t) * qkvWidth;
        const int p = segment.position + t;
        float* k = row + attnWidth + kv * hd;
        const float* v = row + attnWidth + kvHeads_ * hd + kv * hd;
        Rotate(k, p);
        for (int h = kv * group; h < (kv + 1) * group; ++h) Rotate(row + h * hd, p);
        for (int i = 0; i < hd; ++i) {
          keys[(static_cast<size_t>(p / 16) * hd + i) * 16 + p % 16] = k[i];
          values[static_cast<size_t>(p) * hd + i] = v[i];
        }
      }
      for (int h = kv * group; h < (kv + 1) * group; ++h) {
        kernels_.attendHead(qkv + static_cast<size_t>(segment.firstRow) * qkvWidth + h * hd, qkvWidth, segment.count,
                            segment.position, keys, values, hd, scale,
                            attn + static_cast<size_t>(segment.firstRow) * attnWidth + h * hd, attnWidth, scratch);
      }
    });

    team_.Phase(member, Chunks(layer.o, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.o, chunk, rows);
      kernels_.linearPanels(attn, rows, attnWidth, layer.o, x, d, p0, p1, Epilogue::Accumulate);
    });

    ready = false;
    team_.Phase(member, Chunks(layer.gateUp, rows), [&](int chunk) {
      if (!ready) {
        kernels_.rmsNormRows(x, rows, d, d, layer.mlpNorm.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.gateUp, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.gateUp, gateUp, 2 * hidden_, p0, p1, Epilogue::Store);
    });

    ready = false;
    team_.Phase(member, Chunks(layer.down, rows), [&](int chunk) {
      if (!ready) {
        kernels_.swiGlu(gateUp, rows, 2 * hidden_, hidden_, act, hidden_);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.down, chunk, rows);
      kernels_.linearPanels(act, rows, hidden_, layer.down, x, d, p0, p1, Epilogue::Accumulate);
    });
  }
}

}  // namespace tsn
