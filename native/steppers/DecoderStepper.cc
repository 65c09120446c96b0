#include "steppers/DecoderStepper.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <utility>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "kernels/QuantKernels.h"

namespace tsn {

namespace {

// A step of fewer rows than this is one the whole team is worth waking for only when its
// matrices are large: then even one row is bound by memory bandwidth, which one core cannot
// saturate (GPT-2 small bf16, batch 1 on 2 cores: 110 tok/s alone, 170-190 with the team).
// For a small model the meetings at every phase cost more than the work (tiny-gpt, batch 1:
// a hundred times slower with the team).
constexpr int kTeamRows = 4;
constexpr size_t kTeamLayerBytes = 1 << 20;

// Panels per chunk: pairs when many rows make each panel heavy; four (one pass of the
// one-row kernel, which streams four panels at once) for a step of few rows.
int ChunkPanels(int rows) { return rows >= kTeamRows ? 2 : 4; }

// SERVICE_BF16_WEIGHTS (the server checks the value before loading anything): "in-place", a
// bf16 weight is read where it lies (PackedLinear's bf16 rows in place); "packed" or unset, it
// is packed into panels. In place, a first load of a 1B bf16 model took 0.27 s where packing it
// took 4.7 s, and decode at batch 1 ran 1.02-1.05x the panels' rate, a 512-token prefill
// 0.92-0.98x, but batch 8 0.85-0.86x (avx512_bf16; on avx512 and avx2, whose products widen
// every pair of a row, the kernels ran 0.5-0.87x): docs/benchmarks.md section 11.
bool Bf16InPlace() {
  static const bool inPlace = [] {
    const char* layout = std::getenv("SERVICE_BF16_WEIGHTS");
    return layout != nullptr && std::strcmp(layout, "in-place") == 0;
  }();
  return inPlace;
}

}  // namespace

DecoderStepper::DecoderStepper(const NativeContext& context, const char* architecture)
    : kernels_(context.kernels),
      team_(std::make_unique<ThreadTeam>(context.threads)),
      architecture_(architecture),
      kvBudgetBytes_(context.kvBudgetBytes > 0 ? context.kvBudgetBytes : 256LL << 20) {
  weights_ = context.weights.tensors;
  for (const auto& [name, weight] : context.weights.quantized) {
    const WeightType quantType = WeightTypeOf(weight.qtype);
    if (!IsQuantized(quantType)) {
      Mismatch(name + " has the quantization \"" + weight.qtype + "\", which the native runtime does not implement");
    }
    QuantMatrix q{weight.rows, quantType, weight.rows.shape.size() == 2 ? weight.rows.size(0) : 0, weight.cols};
    const int64_t rowBytes = q.cols % BlockValues(q.type) == 0 ? static_cast<int64_t>(RowBytes(q.type, static_cast<int>(q.cols))) : -1;
    if (q.bytes.dtype != WeightDtype::U8 || q.bytes.shape.size() != 2 || rowBytes < 0 || q.bytes.size(1) != rowBytes) {
      Mismatch(name + ": qweight is not uint8 [rows, " + std::to_string(rowBytes) + "] for " + std::to_string(q.cols) + " " +
               weight.qtype + " columns");
    }
    quantized_[name] = std::move(q);
  }
}

const DecoderStepper::QuantMatrix* DecoderStepper::Quantized(const std::string& name) const {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

std::pair<int64_t, int64_t> DecoderStepper::MatrixShape(const std::string& name, int64_t cols) const {
  if (const QuantMatrix* q = Quantized(name)) {
    if (cols >= 0 && q->cols != cols) Mismatch(name + " has " + std::to_string(q->cols) + " columns");
    return {q->rows, q->cols};
  }
  const WeightView& t = Need(name, {-1, cols});
  return {t.size(0), t.size(1)};
}

PackedLinear DecoderStepper::Stack(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t k,
                                   const std::vector<float>& bias, WeightType type) {
  int64_t n = 0;
  for (int64_t r : rows) n += r;
  const QuantMatrix* first = Quantized(names[0]);
  if (first == nullptr) {
    if (names.size() == 1) return Pack(Need(names[0], {rows[0], k}), bias, type);
    // Fused as it is packed, part by part (or read where each part lies): no stacked copy of
    // the layer is made.
    std::vector<const void*> pointers;
    std::vector<const WeightView*> views;
    std::vector<int> counts;
    const WeightDtype dtype = Need(names[0], {rows[0], k}).dtype;
    for (size_t i = 0; i < names.size(); ++i) {
      const WeightView& part = Need(names[i], {rows[i], k});
      if (part.dtype != dtype) Mismatch(names[i] + " has another dtype than " + names[0]);
      pointers.push_back(part.data);
      views.push_back(&part);
      counts.push_back(static_cast<int>(rows[i]));
    }
    if (!bias.empty() && static_cast<int64_t>(bias.size()) != n) Mismatch(names[0] + ": a bias of another width");
    if (dtype == WeightDtype::BF16 && type == WeightType::BF16 && Bf16InPlace()) return InPlace(views, bias);
    return Counted(PackedLinear(pointers, counts, SourceType(dtype), bias.empty() ? nullptr : bias.data(),
                                static_cast<int>(n), static_cast<int>(k), type));
  }
  auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  std::vector<const uint8_t*> pointers;
  std::vector<WeightType> types;
  for (size_t i = 0; i < names.size(); ++i) {
    const QuantMatrix* q = Quantized(names[i]);
    if (q == nullptr) Mismatch(names[i] + " is not quantized, and " + names[0] + " is");
    if (q->rows != rows[i] || q->cols != k) Mismatch(names[i] + " has shape [" + std::to_string(q->rows) + ", " + std::to_string(q->cols) + "]");
    const uint8_t* base = static_cast<const uint8_t*>(q->bytes.data);
    const int64_t stride = q->bytes.size(1);
    for (int64_t r = 0; r < q->rows; ++r) pointers.push_back(base + r * stride);
    types.insert(types.end(), q->rows, q->type);
    owners->push_back(q->bytes.owner);
  }
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != n) Mismatch(names[0] + ": a bias of another width");
  // The rows stay the module's tensors (released from the module once packed, kept alive here).
  return Counted(PackedLinear(std::move(pointers), std::move(types), std::move(owners), bias.empty() ? nullptr : bias.data(),
                              static_cast<int>(n), static_cast<int>(k)));
}

void DecoderStepper::SetShape(int layers, int kvHeads, int headDim, int embd, int vocab, int context,
                              WeightType cacheType) {
  layers_ = layers;
  embd_ = embd;
  vocab_ = vocab;
  context_ = context;
  // A quantized checkpoint (float32 activations) keeps its keys and values in bf16, as llama.cpp
  // keeps them in f16: half a float32 row, so twice the rows in the same budget and half the
  // bytes attention reads; bf16 rather than f16 because it keeps float32's range.
  if (cacheType == WeightType::F32 && !quantized_.empty()) cacheType = WeightType::BF16;
  cache_.Configure(layers, kvHeads, headDim, context, cacheType);
  normed_.resize(team_->size());
  scratch_.resize(team_->size());
  for (auto& scratch : scratch_) scratch.Resize(static_cast<size_t>(kAttendScratchRows) * cache_.contextPad());
}

const WeightView& DecoderStepper::Need(const std::string& name, std::vector<int64_t> shape) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) Mismatch("missing " + name);
  const std::vector<int64_t>& sizes = it->second.shape;
  bool fits = sizes.size() == shape.size();
  for (size_t i = 0; fits && i < shape.size(); ++i) fits = shape[i] < 0 || sizes[i] == shape[i];
  if (!fits) {
    std::string shown;
    for (int64_t size : sizes) shown += (shown.empty() ? "" : ", ") + std::to_string(size);
    Mismatch(name + " has shape [" + shown + "]");
  }
  return it->second;
}

void DecoderStepper::Mismatch(const std::string& what) const {
  throw CodedError(ErrorCode::kCheckpointInterface,
                   std::string("not the ") + architecture_ + " parameter layout for the native runtime: " + what);
}

bool DecoderStepper::Shared(const WeightView& a, const WeightView& b) { return a.data == b.data && a.shape == b.shape; }

std::vector<float> DecoderStepper::Floats(const WeightView& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.numel()));
  if (tensor.dtype == WeightDtype::F32) {
    const float* data = static_cast<const float*>(tensor.data);
    std::copy(data, data + out.size(), out.begin());
  } else if (tensor.dtype == WeightDtype::BF16 || tensor.dtype == WeightDtype::F16) {
    const uint16_t* bits = static_cast<const uint16_t*>(tensor.data);
    for (size_t i = 0; i < out.size(); ++i) {
      if (tensor.dtype == WeightDtype::F16) {
        out[i] = HalfToFloat(bits[i]);
      } else {
        const uint32_t wide = static_cast<uint32_t>(bits[i]) << 16;
        std::memcpy(&out[i], &wide, sizeof wide);
      }
    }
  } else {
    throw CodedError(ErrorCode::kCheckpointInterface, "a uint8 tensor where floats belong");
  }
  return out;
}

std::vector<float> DecoderStepper::Copy(const WeightView& tensor) {
  std::vector<float> out = Floats(tensor);
  heldBytes_ += static_cast<int64_t>(out.size() * sizeof(float));
  return out;
}

WeightType DecoderStepper::SourceType(WeightDtype dtype) {
  return dtype == WeightDtype::BF16 ? WeightType::BF16 : dtype == WeightDtype::F16 ? WeightType::F16 : WeightType::F32;
}

PackedLinear DecoderStepper::InPlace(const std::vector<const WeightView*>& parts, const std::vector<float>& bias) {
  auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  std::vector<const uint8_t*> pointers;
  const int64_t k = parts[0]->size(1);
  for (const WeightView* part : parts) {
    const auto* base = static_cast<const uint8_t*>(part->data);
    for (int64_t r = 0; r < part->size(0); ++r) pointers.push_back(base + r * k * 2);
    owners->push_back(part->owner);
  }
  const int n = static_cast<int>(pointers.size());
  // The rows stay the checkpoint's tensors (kept alive here), as a quantized matrix's do.
  return Counted(PackedLinear(std::move(pointers), std::vector<WeightType>(n, WeightType::BF16), std::move(owners),
                              bias.empty() ? nullptr : bias.data(), n, static_cast<int>(k)));
}

PackedLinear DecoderStepper::Pack(const WeightView& weight, const std::vector<float>& bias, WeightType type) {
  if (weight.dtype == WeightDtype::U8 || weight.shape.size() != 2) Mismatch("a matrix that is not float32, bf16 or fp16 [n, k]");
  if (!bias.empty() && static_cast<int64_t>(bias.size()) != weight.size(0)) Mismatch("a bias of another width than its weight");
  if (weight.dtype == WeightDtype::BF16 && type == WeightType::BF16 && Bf16InPlace()) return InPlace({&weight}, bias);
  return Counted(PackedLinear(weight.data, SourceType(weight.dtype), bias.empty() ? nullptr : bias.data(),
                              static_cast<int>(weight.size(0)), static_cast<int>(weight.size(1)), type));
}

PackedLinear DecoderStepper::Counted(PackedLinear w) {
  heldBytes_ += static_cast<int64_t>(w.bytes() + w.panels() * 16 * sizeof(float));
  return w;
}

void DecoderStepper::Begin(int64_t batch) {
  cache_.Allocate(static_cast<int>(batch));
  logits_.reset();
}

int64_t DecoderStepper::SlotBudget() const {
  return std::clamp<int64_t>(kvBudgetBytes_ / cache_.BytesPerSlot(), 8, 64);
}

std::string DecoderStepper::OwnWeights(RegroupCache* cache) {
  // Q4_K groups on avx2, and on Intel CPUs on the AVX-512 families (two groups a 512-bit
  // register, DotQ4KGroupPair: kernels-ab on a Xeon, against the rows' pair kernels, 1.25-1.44x
  // from 16 rows on avx512, 1.02-1.30x on avx512_bf16; docs/benchmarks.md section 7; see
  // FamilyRegroups); Q8_0 groups on the avx2 and avx512 families (pmaddwd in place of the rows' sign
  // trick: 1.4-1.5x from six rows on avx2, 1.2-1.4x from twelve rows on avx512 with two rows to
  // a 512-bit register); Q8_0 tile panels on the VNNI families (avx512_bf16, amx), whose vpdpbusd
  // (and amx's tiles) read each block of sixteen columns as it lies (kernels-ab, avx512_bf16,
  // against its GGUF rows: 1 row 0.98-1.34x, 4 rows 1.29-1.35x, 16 rows 1.98-2.00x, 500 rows
  // 2.17-2.85x);
  // Q4_0 and Q5_0 groups on every SIMD family (kernels-ab.sh, Zen 5: avx512_bf16 1-2 rows
  // 1.24-2.29x, 8-64 rows 1.06-1.09x), not on the baseline (its lane-at-a-time group is slower).
  const std::string family = kernels_.name;
  const std::vector<PackedLinear*> products = Products();
  // bf16 matrices read where they lie (Bf16InPlace) are said so, as the layouts below are.
  int bf16InPlace = 0;
  for (const PackedLinear* w : products) bf16InPlace += w->inPlace() && !w->quantized();
  std::string note;
  if (bf16InPlace > 0) {
    note = std::to_string(bf16InPlace) + " bf16 matrices read where they lie, not packed, by the " + family + " kernels";
  }
  if (family == "baseline") return note;
  const bool q4k = FamilyRegroups(kernels_, WeightType::Q4_K), q8 = family == "avx2" || family == "avx512",
             q8Tiles = family == "amx" || family == "avx512_bf16";
  // The quantized rows more than one matrix reads (none in the layouts of today).
  std::vector<const uint8_t*> rows;
  for (const PackedLinear* w : products) {
    for (int c = 0; w->quantized() && c < w->n(); ++c) rows.push_back(w->quantRow(c));
  }
  std::sort(rows.begin(), rows.end());
  std::unordered_set<const uint8_t*> shared;
  for (size_t i = 1; i < rows.size(); ++i) {
    if (rows[i] == rows[i - 1]) shared.insert(rows[i]);
  }
  int groups = 0, groups32 = 0, groupsQ8 = 0, tilesQ8 = 0;
  for (PackedLinear* w : products) {
    bool alone = w->quantized();
    for (int c = 0; alone && c < w->n(); ++c) alone = shared.count(w->quantRow(c)) == 0;
    if (!alone) continue;
    if (q4k) groups += w->InterleaveQ4K(cache);
    if (q8) groupsQ8 += w->InterleaveQ8_0(cache);
    if (q8Tiles) tilesQ8 += w->TileQ8_0(cache);
    groups32 += w->InterleaveBlock32(cache);
  }
  if (tilesQ8 > 0) {
    note += (note.empty() ? "" : "; ") + std::string("Q8_0 rows laid out in ") + std::to_string(tilesQ8) +
            " tile panels of sixteen for the " + family + " kernels";
  }
  for (const auto& [types, count] : {std::pair<const char*, int>{"Q4_K", groups}, {"Q8_0", groupsQ8}, {"Q4_0/Q5_0", groups32}}) {
    if (count == 0) continue;
    note += (note.empty() ? "" : "; ") + std::string(types) + " rows interleaved in " + std::to_string(count) +
            " groups of eight for the " + family + " kernels";
  }
  return note;
}

void DecoderStepper::UseThreads(int threads) {
  threads = std::clamp(threads, 1, team_->size());
  if (threads == team_->size()) return;
  team_ = std::make_unique<ThreadTeam>(threads);  // the old team's workers are joined
  normed_.resize(static_cast<size_t>(threads));
  scratch_.resize(static_cast<size_t>(threads));
  Members(threads);
}

void DecoderStepper::CopyRow(int64_t from, int64_t to) {
  cache_.CopySlot(static_cast<int>(from), static_cast<int>(to));
}

void DecoderStepper::CopyRow(int64_t from, int64_t to, int64_t positions) {
  cache_.CopySlot(static_cast<int>(from), static_cast<int>(to), static_cast<int>(positions));
}

std::shared_ptr<const Logits> DecoderStepper::Step(const StepBatch& batch) {
  const int slots = static_cast<int>(batch.slots);
  if (slots != cache_.slots()) throw CodedError(ErrorCode::kInference, "step batch does not match the cache");
  segments_.clear();
  int rows = 0;
  for (int s = 0; s < slots; ++s) {
    const int count = static_cast<int>(batch.lengths[s]);
    if (count <= 0) continue;
    if (count > batch.width) throw CodedError(ErrorCode::kInference, "a row feeds more tokens than the step holds");
    const int position = static_cast<int>(batch.positions[s]);
    if (position < 0 || position + count > context_) {
      throw CodedError(ErrorCode::kInference, "a row would pass the model's context length");
    }
    segments_.push_back({s, rows, count, position});
    rows += count;
  }
  // Fresh [slots, vocab] logits each step would be zero-filled and mapped anew (page faults on
  // every step): measured 20% of a GPT-2-small batch-1 step on 2 threads. The previous step's
  // are reused unless a caller still holds them. Rows of idle slots are left as they are
  // (nobody samples them).
  if (!logits_ || logits_->rows() != slots || logits_.use_count() > 1) {
    logits_ = std::make_shared<HostLogits>(slots, vocab_);
  }
  if (rows == 0) return logits_;

  const size_t d = embd_;
  x_.Resize(rows * d);
  const int count = static_cast<int>(segments_.size());
  for (auto& normed : normed_) normed.Resize(std::max(rows, count) * d);
  Reserve(rows);
  for (const Segment& segment : segments_) {
    for (int t = 0; t < segment.count; ++t) {
      const int64_t token = batch.token(segment.slot, t);
      if (token < 0 || token >= vocab_) throw CodedError(ErrorCode::kInvalidArgument, "token id outside the vocabulary");
      Embed(token, segment.position + t, x_.get() + (segment.firstRow + t) * d);
    }
  }

  // Segments of consecutive slots (a batch-1 step, a full batch) write their logits in place.
  float* out = logits_->data();
  const bool inPlace = segments_.back().slot - segments_.front().slot == count - 1;
  float* last = out + static_cast<size_t>(segments_.front().slot) * vocab_;
  if (!inPlace) {
    last_.Resize(static_cast<size_t>(count) * vocab_);
    last = last_.get();
  }
  team_->Run(
      [&](int member) {
        Layers(member, rows);
        float* normed = normed_[member].get();
        bool ready = false;
        team_->Phase(member, Chunks(head_, rows), [&](int chunk) {
          // A member normalises the rows itself before its first chunk: cheaper than a phase.
          if (!ready) {
            for (int j = 0; j < count; ++j) {
              const Segment& segment = segments_[j];
              FinalNorm(x_.get() + (segment.firstRow + segment.count - 1) * d, normed + j * d);
            }
            ready = true;
          }
          const auto [p0, p1] = Columns(head_, chunk, rows);
          kernels_.linearPanels(normed, count, embd_, head_, last, vocab_, p0, p1, Epilogue::Store);
        });
      },
      PhasesPerLayer() * layers_ + 1,
      rows >= kTeamRows || LayerBytes() >= kTeamLayerBytes ? team_->size() : 1);
  if (!inPlace) {
    for (int j = 0; j < count; ++j) {
      std::memcpy(out + static_cast<size_t>(segments_[j].slot) * vocab_, last + static_cast<size_t>(j) * vocab_,
                  sizeof(float) * vocab_);
    }
  }
  return logits_;
}

int DecoderStepper::Chunks(const PackedLinear& w, int rows) {
  const int width = ChunkPanels(rows);
  return (w.panels() + width - 1) / width;
}

std::pair<int, int> DecoderStepper::Columns(const PackedLinear& w, int chunk, int rows) {
  const int width = ChunkPanels(rows);
  return {width * chunk, std::min(width * (chunk + 1), w.panels())};
}

}  // namespace tsn
