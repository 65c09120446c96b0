#include "GptStepper.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ErrorCodes.h"
#include "Errors.h"

namespace tsn {

namespace {

using Weights = std::map<std::string, at::Tensor>;

// Fewest token rows in a step for which the whole team is worth waking (measured on the
// demo model, 2 threads: batch 1 ran at half the speed with the team, batch 8 at 1.4x).
constexpr int kTeamRows = 4;

[[noreturn]] void Mismatch(const std::string& what) {
  throw CodedError(ErrorCode::kCheckpointInterface, "not the gpt parameter layout for the native runtime: " + what);
}

const at::Tensor& Need(const Weights& weights, const std::string& name, std::vector<int64_t> shape) {
  auto it = weights.find(name);
  if (it == weights.end()) Mismatch("missing " + name);
  if (it->second.sizes().vec() != shape) Mismatch(name + " has shape " + c10::str(it->second.sizes()));
  return it->second;
}

const float* Optional(const Weights& weights, const std::string& name, int64_t size) {
  auto it = weights.find(name);
  if (it == weights.end()) return nullptr;
  if (it->second.numel() != size) Mismatch(name + " has " + std::to_string(it->second.numel()) + " values");
  return it->second.data_ptr<float>();
}

std::vector<float> Copy(const at::Tensor& tensor) {
  const float* data = tensor.data_ptr<float>();
  return std::vector<float>(data, data + tensor.numel());
}

PackedLinear Pack(const Weights& weights, const std::string& prefix, int64_t n, int64_t k, WeightType type) {
  const at::Tensor& weight = Need(weights, prefix + ".weight", {n, k});
  return PackedLinear(weight.data_ptr<float>(), Optional(weights, prefix + ".bias", n), static_cast<int>(n),
                      static_cast<int>(k), type);
}

}  // namespace

GptStepper::GptStepper(const NativeContext& context) : kernels_(context.kernels), team_(context.threads) {
  const torch::jit::Module& module = context.module;
  const std::string gelu = context.fields.String("gelu", "tanh");
  if (gelu != "tanh" && gelu != "none") Mismatch("gelu must be \"tanh\" or \"none\"");
  gelu_ = gelu == "tanh" ? Epilogue::GeluTanh : Epilogue::GeluErf;
  const WeightType type = WeightTypeOf(context.fields.String("dtype", "float32"));
  Weights weights;
  for (const auto& p : module.named_parameters(true)) {
    weights[p.name] = p.value.detach().to(at::kCPU).to(at::kFloat).contiguous();
  }
  if (!weights.count("wte.weight") || weights.at("wte.weight").dim() != 2) Mismatch("missing a 2-D wte.weight");
  const at::Tensor wte = weights.at("wte.weight");
  vocab_ = static_cast<int>(wte.size(0));
  embd_ = static_cast<int>(wte.size(1));
  if (!weights.count("wpe.weight")) Mismatch("missing wpe.weight");
  context_ = static_cast<int>(weights["wpe.weight"].size(0));
  contextPad_ = (context_ + 15) / 16 * 16;
  while (weights.count("blocks." + std::to_string(layers_) + ".ln_1.weight")) ++layers_;
  if (layers_ == 0) Mismatch("no blocks.0");

  torch::jit::Module handle = module;  // run_method is not const
  const auto shape = handle.run_method("cache_shape", int64_t{1}).toIntVector();
  if (shape.size() != 6 || shape[0] != layers_ || shape[4] != context_) Mismatch("unexpected cache_shape(1)");
  heads_ = static_cast<int>(shape[3]);
  headDim_ = static_cast<int>(shape[5]);
  if (heads_ * headDim_ != embd_) Mismatch("heads * head_dim != n_embd");

  const int64_t d = embd_;
  wte_ = Copy(wte);
  wpe_ = Copy(Need(weights, "wpe.weight", {context_, d}));
  for (int l = 0; l < layers_; ++l) {
    const std::string p = "blocks." + std::to_string(l);
    Layer layer;
    layer.ln1Gamma = Copy(Need(weights, p + ".ln_1.weight", {d}));
    layer.ln1Beta = Copy(Need(weights, p + ".ln_1.bias", {d}));
    layer.ln2Gamma = Copy(Need(weights, p + ".ln_2.weight", {d}));
    layer.ln2Beta = Copy(Need(weights, p + ".ln_2.bias", {d}));
    layer.qkv = Pack(weights, p + ".attn.c_attn", 3 * d, d, type);
    layer.proj = Pack(weights, p + ".attn.c_proj", d, d, type);
    layer.fc = Pack(weights, p + ".mlp.c_fc", 4 * d, d, type);
    layer.out = Pack(weights, p + ".mlp.c_proj", d, 4 * d, type);
    blocks_.push_back(std::move(layer));
  }
  lnfGamma_ = Copy(Need(weights, "ln_f.weight", {d}));
  lnfBeta_ = Copy(Need(weights, "ln_f.bias", {d}));
  const at::Tensor& head = weights.count("lm_head.weight") ? Need(weights, "lm_head.weight", {vocab_, d}) : wte;
  head_ = PackedLinear(head.data_ptr<float>(), nullptr, vocab_, embd_, type);
  normed_.resize(team_.size());
  scratch_.resize(team_.size());
  for (auto& scratch : scratch_) scratch.Resize(contextPad_);
}

float* GptStepper::KeyTiles(int layer, int slot, int head) const {
  return keys_.get() + ((static_cast<size_t>(layer) * slots_ + slot) * heads_ + head) * headDim_ * contextPad_;
}

float* GptStepper::Values(int layer, int slot, int head) const {
  return values_.get() + ((static_cast<size_t>(layer) * slots_ + slot) * heads_ + head) * contextPad_ * headDim_;
}

void GptStepper::Begin(int64_t batch) {
  // Never read before written (attention only sees positions already fed), so not cleared.
  slots_ = static_cast<int>(batch);
  const size_t perCache = static_cast<size_t>(layers_) * slots_ * heads_ * headDim_ * contextPad_;
  keys_.Resize(perCache);
  values_.Resize(perCache);
}

void GptStepper::CopyRow(int64_t from, int64_t to) {
  if (from == to) return;
  // A slot's heads are contiguous within a layer, in both caches.
  const size_t perSlot = static_cast<size_t>(heads_) * headDim_ * contextPad_;
  for (int layer = 0; layer < layers_; ++layer) {
    std::memcpy(KeyTiles(layer, static_cast<int>(to), 0), KeyTiles(layer, static_cast<int>(from), 0), perSlot * sizeof(float));
    std::memcpy(Values(layer, static_cast<int>(to), 0), Values(layer, static_cast<int>(from), 0), perSlot * sizeof(float));
  }
}

int64_t GptStepper::SlotBudget() const {
  const int64_t bytesPerSlot = 2LL * layers_ * heads_ * headDim_ * contextPad_ * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>((256LL << 20) / bytesPerSlot, 8, 64);
}

at::Tensor GptStepper::Step(const at::Tensor& idx, const at::Tensor& pos, const at::Tensor& lengths) {
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
  qkvOut_.Resize(rows * 3 * d);
  attn_.Resize(rows * d);
  hidden_.Resize(rows * 4 * d);
  const size_t normedRows = std::max<size_t>(rows, segments_.size());
  for (auto& normed : normed_) normed.Resize(normedRows * d);
  AlignedFloats last;
  last.Resize(segments_.size() * vocab_);

  for (const Segment& segment : segments_) {
    for (int t = 0; t < segment.count; ++t) {
      const int64_t token = tokens[segment.slot][t];
      if (token < 0 || token >= vocab_) throw CodedError(ErrorCode::kInvalidArgument, "token id outside the vocabulary");
      const float* te = wte_.data() + token * d;
      const float* pe = wpe_.data() + static_cast<size_t>(segment.position + t) * d;
      float* out = x_.get() + static_cast<size_t>(segment.firstRow + t) * d;
      for (size_t i = 0; i < d; ++i) out[i] = te[i] + pe[i];
    }
  }

  const int count = static_cast<int>(segments_.size());
  team_.Run(
      [&](int member) {
        Layers(member, rows);
        // Logits after each row's last token only.
        float* normed = normed_[member].get();
        bool ready = false;
        team_.Phase(member, Chunks(head_, rows), [&](int chunk) {
          if (!ready) {
            for (int j = 0; j < count; ++j) {
              const Segment& segment = segments_[j];
              kernels_.layerNormRows(x_.get() + (segment.firstRow + segment.count - 1) * d, 1, embd_, embd_, lnfGamma_.data(),
                            lnfBeta_.data(), eps_, normed + j * d, embd_);
            }
            ready = true;
          }
          const auto [p0, p1] = Columns(head_, chunk, rows);
          kernels_.linearPanels(normed, count, embd_, head_, last.get(), vocab_, p0, p1, Epilogue::Store);
        });
      },
      5 * layers_ + 1,
      // A step of a row or two is over before a team could split it (waking the others and
      // meeting at every phase cost more than the work): the inference thread runs it alone.
      rows >= kTeamRows ? team_.size() : 1);
  float* out = logits.data_ptr<float>();
  for (int j = 0; j < count; ++j) {
    std::memcpy(out + static_cast<size_t>(segments_[j].slot) * vocab_, last.get() + static_cast<size_t>(j) * vocab_,
                sizeof(float) * vocab_);
  }
  return logits;
}

int GptStepper::ChunkPanels(int rows) { return rows >= kTeamRows ? 2 : 8; }

int GptStepper::Chunks(const PackedLinear& w, int rows) {
  const int width = ChunkPanels(rows);
  return (w.panels() + width - 1) / width;
}

std::pair<int, int> GptStepper::Columns(const PackedLinear& w, int chunk, int rows) {
  const int width = ChunkPanels(rows);
  return {width * chunk, std::min(width * (chunk + 1), w.panels())};
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
    team_.Phase(member, Chunks(layer.qkv, rows), [&](int chunk) {
      if (!ready) {
        kernels_.layerNormRows(x, rows, d, d, layer.ln1Gamma.data(), layer.ln1Beta.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.qkv, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.qkv, qkv, 3 * d, p0, p1, Epilogue::Store);
    });

    team_.Phase(member, static_cast<int>(segments_.size()) * heads_, [&](int task) {
      const Segment& segment = segments_[task / heads_];
      const int h = task % heads_;
      float* keys = KeyTiles(l, segment.slot, h);
      float* values = Values(l, segment.slot, h);
      for (int t = 0; t < segment.count; ++t) {
        const float* row = qkv + static_cast<size_t>(segment.firstRow + t) * 3 * d;
        const int p = segment.position + t;
        for (int i = 0; i < headDim_; ++i) {
          keys[(static_cast<size_t>(p / 16) * headDim_ + i) * 16 + p % 16] = row[d + h * headDim_ + i];
          values[static_cast<size_t>(p) * headDim_ + i] = row[2 * d + h * headDim_ + i];
        }
      }
      kernels_.attendHead(qkv + static_cast<size_t>(segment.firstRow) * 3 * d + h * headDim_, 3 * d, segment.count,
                 segment.position, keys, values, headDim_, scale,
                 attn + static_cast<size_t>(segment.firstRow) * d + h * headDim_, d, scratch);
    });

    team_.Phase(member, Chunks(layer.proj, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.proj, chunk, rows);
      kernels_.linearPanels(attn, rows, d, layer.proj, x, d, p0, p1, Epilogue::Accumulate);
    });

    ready = false;
    team_.Phase(member, Chunks(layer.fc, rows), [&](int chunk) {
      if (!ready) {
        kernels_.layerNormRows(x, rows, d, d, layer.ln2Gamma.data(), layer.ln2Beta.data(), eps_, normed, d);
        ready = true;
      }
      const auto [p0, p1] = Columns(layer.fc, chunk, rows);
      kernels_.linearPanels(normed, rows, d, layer.fc, hidden, 4 * d, p0, p1, gelu_);
    });

    team_.Phase(member, Chunks(layer.out, rows), [&](int chunk) {
      const auto [p0, p1] = Columns(layer.out, chunk, rows);
      kernels_.linearPanels(hidden, rows, 4 * d, layer.out, x, d, p0, p1, Epilogue::Accumulate);
    });
  }
}

}  // namespace tsn
