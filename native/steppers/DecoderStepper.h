// What the native CPU steppers (GptStepper, LlamaStepper) share: a decoder-only transformer
// step over slots of one KvCache, computing only real tokens (no padding rows; idle slots
// cost nothing, so jobs share the cache and batch continuously), on a ThreadTeam, with the
// output head applied to each row's last token only. A subclass reads its weights, fills the
// embeddings of the step's tokens and runs its layers; this class does the rest.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/Kernels.h"
#include "kernels/ThreadTeam.h"
#include "steppers/KvCache.h"
#include "steppers/Stepper.h"

namespace tsn {

class DecoderStepper : public Stepper {
 public:
  void Begin(int64_t batch) override;
  std::shared_ptr<const Logits> Step(const StepBatch& batch) override;
  bool AddressableSlots() const override { return true; }
  // As many slots as fit in the KV budget (256 MiB by default; at least 8, at most 64).
  int64_t SlotBudget() const override;
  int64_t CacheBytesPerRow() const override { return cache_.BytesPerSlot(); }
  int64_t WeightBytes() const override { return heldBytes_; }
  bool CanCopyRows() const override { return true; }
  void CopyRow(int64_t from, int64_t to) override;
  void CopyRow(int64_t from, int64_t to, int64_t positions) override;
  bool RetainsCache() const override { return true; }
  void End() override {}
  // The Q4_K matrices' rows interleaved in groups of eight on avx2, and on Intel CPUs on the
  // AVX-512 families (PackedLinear::InterleaveQ4K; avx2's products ran 1.03-1.38x faster, the
  // AVX-512 families' on a Xeon from 16 rows 1.02-1.44x), the Q8_0 ones on the avx2
  // and avx512 families (InterleaveQ8_0; 1.2-1.5x from six rows), and the Q4_0 and Q5_0 ones on
  // every SIMD family (InterleaveBlock32; 1.03-2.9x); docs/benchmarks.md section 7. A quantized
  // row two matrices share stays as it is.
  std::string OwnWeights(RegroupCache* cache) override;
  void UseThreads(int threads) override;

 protected:
  // The step's tokens of one slot: rows firstRow .. firstRow + count - 1 of the activations,
  // at positions position .. position + count - 1.
  struct Segment {
    int slot, firstRow, count, position;
  };

  // `architecture` names the layout in errors.
  DecoderStepper(const NativeContext& context, const char* architecture);

  // Called once by the subclass constructor when the shapes are known. The cache holds
  // keys and values in `cacheType` (the checkpoint's dtype), or in bf16 for a quantized
  // checkpoint.
  void SetShape(int layers, int kvHeads, int headDim, int embd, int vocab, int context, WeightType cacheType);

  // The checkpoint's parameters by name, in their own dtype (no copy is made; packing reads
  // them as they are); a -1 in `shape` matches any size.
  const WeightView& Need(const std::string& name, std::vector<int64_t> shape) const;
  bool Has(const std::string& name) const { return weights_.count(name) > 0; }
  // Whether two parameters are one tensor (a head tied to the embedding).
  static bool Shared(const WeightView& a, const WeightView& b);
  // Throws CodedError(ERR_CHECKPOINT_INTERFACE) naming the architecture and `what`.
  [[noreturn]] void Mismatch(const std::string& what) const;
  // A small tensor (norms, position tables) as floats, counted in WeightBytes().
  std::vector<float> Copy(const WeightView& tensor);
  // Counts tables a subclass builds itself in WeightBytes().
  void Held(size_t bytes) { heldBytes_ += static_cast<int64_t>(bytes); }
  // The same, not counted (a bias: packing keeps its own copy).
  static std::vector<float> Floats(const WeightView& tensor);
  // A weight [n, k] (float32, bf16 or fp16) and optional bias (n floats, or none) packed as
  // `type`, counted in WeightBytes(); a 16-bit weight is packed from its own bits, never
  // through a float32 copy.
  PackedLinear Pack(const WeightView& weight, const std::vector<float>& bias, WeightType type);
  // bf16 matrices ([rows_i, k] each) stacked by rows and read where they lie, not packed
  // (PackedLinear's bf16 rows in place), counted in WeightBytes() like Pack; `bias` (the rows'
  // count, or none) checked by the caller. Pack and Stack take this path for a bf16 weight of a
  // bf16 checkpoint with SERVICE_BF16_WEIGHTS=in-place.
  PackedLinear InPlace(const std::vector<const WeightView*>& parts, const std::vector<float>& bias);
  // `w`, its bytes and bias counted in WeightBytes().
  PackedLinear Counted(PackedLinear w);
  // The kernels' name of a weight's dtype, as packing reads it.
  static WeightType SourceType(WeightDtype dtype);
  // Lets go of the module's tensors once the packed weights are built: the runtime then
  // holds no reference to them, and releasing the module's parameters frees them.
  void DropWeights() {
    weights_.clear();
    quantized_.clear();
  }

  // Quantized matrices (CheckpointWeights::quantized), by their weight's name
  // ("layers.0.q_proj.weight"); the bytes are the checkpoint's own, not a copy.
  struct QuantMatrix {
    WeightView bytes;  // uint8 [rows, row bytes]
    WeightType type;
    int64_t rows, cols;
  };
  const QuantMatrix* Quantized(const std::string& name) const;
  bool HasMatrix(const std::string& name) const { return Has(name) || Quantized(name) != nullptr; }
  // [rows, cols] of a float or quantized matrix (a Mismatch when absent, or when `cols` is
  // given and differs).
  std::pair<int64_t, int64_t> MatrixShape(const std::string& name, int64_t cols = -1) const;
  // The named matrices ([rows[i], k] each) stacked by rows into one PackedLinear: float ones
  // packed as `type`, quantized ones (of any quantized types) read in place.
  // Counted in WeightBytes() like Pack (quantized bytes stay the module's tensors, shared).
  PackedLinear Stack(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t k,
                     const std::vector<float>& bias, WeightType type);

  // The matrices the step only multiplies by (not a table whose rows are looked up: an
  // embedding table, or a head tied to it).
  virtual std::vector<PackedLinear*> Products() = 0;
  // Products() of a subclass: the head unless it is tied (its rows are looked up as
  // embeddings too), and the named matrices of every layer.
  template <typename Layer, typename... Members>
  std::vector<PackedLinear*> LayerProducts(std::vector<Layer>& layers, bool tied, Members... members) {
    std::vector<PackedLinear*> out;
    if (!tied) out.push_back(&head_);
    for (Layer& layer : layers) (out.push_back(&(layer.*members)), ...);
    return out;
  }
  // Sizes the subclass's activations for a step of `rows` tokens (before the team runs).
  virtual void Reserve(int rows) = 0;
  // The team now has `members` members (UseThreads): per-member buffers past them may go.
  virtual void Members(int /*members*/) {}
  // x[row] = the embedding of `token` at `position` (embd floats).
  virtual void Embed(int64_t token, int position, float* row) const = 0;
  // Runs inside team_.Run on every member: each layer's phases over x_ (rows real tokens).
  virtual void Layers(int member, int rows) = 0;
  // The final norm of one row (embd floats).
  virtual void FinalNorm(const float* x, float* out) const = 0;
  // Phases a subclass's Layers runs, per layer (the head adds one).
  virtual int PhasesPerLayer() const = 0;
  // Bytes of weights one layer streams per step (whether a small step wakes the team).
  virtual size_t LayerBytes() const = 0;

  // Chunks of a matrix product (the unit a team member takes) in a step of `rows` rows, and
  // the panel range of one chunk.
  static int Chunks(const PackedLinear& w, int rows);
  static std::pair<int, int> Columns(const PackedLinear& w, int chunk, int rows);

  const KernelSet& kernels_;
  std::unique_ptr<ThreadTeam> team_;
  KvCache cache_;
  PackedLinear head_;
  int layers_ = 0, embd_ = 0, vocab_ = 0, context_ = 0;
  std::vector<Segment> segments_;
  AlignedFloats x_;                                 // [rows][embd] residual stream
  std::vector<AlignedFloats> normed_, scratch_;  // per team member

 private:
  const char* architecture_;
  int64_t kvBudgetBytes_;
  std::map<std::string, WeightView> weights_;
  int64_t heldBytes_ = 0;  // packed weights and float tables built from the checkpoint
  std::map<std::string, QuantMatrix> quantized_;
  AlignedFloats last_;   // [segments][vocab]: logits of each segment's last token
  std::shared_ptr<HostLogits> logits_;  // [slots][vocab], reused while nobody else holds it
};

}  // namespace tsn
