// CPU kernels of the native runtimes. Plain C++ with GCC vector types, compiled for AVX-512,
// AVX2+FMA and baseline x86-64; a stepper picks one family at configure time (the best the CPU
// has, or a lower one when SERVICE_KERNELS caps it), so one binary runs on any x86-64 host at
// its best width and every family can be tested on one machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tsn {

// Asks the kernel to back the whole 2 MiB pages of [memory, memory + bytes) with huge pages
// (before they are first written): one fault per 2 MiB instead of per 4 KiB.
void AdviseHugePages(void* memory, size_t bytes);

// 64-byte aligned float storage.
struct AlignedFloats {
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data;
  size_t size = 0;
  // Contents are not preserved or initialised. `whole`: the caller writes all of it at once
  // (a packed weight), so a large block goes on huge pages; a KV cache or scratch buffer,
  // touched a little at a time, stays on 4 KiB pages so resident memory counts what is used.
  void Resize(size_t count, bool whole = false);
  float* get() const { return data.get(); }
};

// How a packed weight is stored. Products are always accumulated in float32.
//   F32:  panel[k * 16 + c]
//   BF16: panel[(k / 2) * 32 + c * 2 + k % 2]: each 32-bit lane holds the pair (k, k + 1) of
//         column c, the operand layout of AVX512_BF16's vdpbf16ps; widening the pair to two
//         floats is a shift and a mask.
//   F16:  panel[k * 16 + c] (16 halves, one vcvtph2ps).
//   Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K: not packed: each output column's row is GGUF's, as the
//         checkpoint stores it (see QuantKernels.h), read in place; the rows of one layer may
//         mix types.
//   BF16 rows in place (PackedLinear's rows constructor, inPlace()): not packed either: each
//         output column's row is the checkpoint's k bf16 values, read where they lie. A first
//         load then writes no copy of the weights (packing 2.47 GB of a 1B model into memory
//         the process had not touched took 3.6 s, against 0.2 s to read the file).
// The 16-bit types need an even K (every real model's widths are); Q8_0, Q4_0 and Q5_0 a
// multiple of 32, the K-quants of 256. (Q4_0, Q5_0, then Q5_K come last so that kernels-ab.sh's
// base build, from before them, reads the others' values alike.)
enum class WeightType { F32, BF16, F16, Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K };

// The quantized types of 32-value blocks (their products share the Q8_0 activations).
inline bool IsBlock32(WeightType t) { return t == WeightType::Q8_0 || t == WeightType::Q4_0 || t == WeightType::Q5_0; }
// The quantized types (GGUF rows read in place), as against the packed float ones.
inline bool IsQuantized(WeightType t) {
  return IsBlock32(t) || t == WeightType::Q4_K || t == WeightType::Q6_K || t == WeightType::Q5_K;
}

// Rewrites one run of rows (a group, or a tile panel) from their GGUF layout to the kernels'.
using RewriteRun = std::function<void(const uint8_t* from, uint8_t* to)>;

// Where PackedLinear's regrouped runs come from or go (runtime/LayoutCache.h): a layout made by
// an earlier load, or the runs this load leaves for a layout file to be written, for this
// process to take back once written and for the next load.
class RegroupCache {
 public:
  virtual ~RegroupCache() = default;
  // The next `bytes` of a layout made earlier (owner keeps them alive), or null: the rows are
  // rewritten here (or deferred).
  virtual const uint8_t* Take(size_t bytes, std::shared_ptr<const void>* owner) = 0;
  // Runs the cache will lay out itself, later: each of `sources` rewritten by `rewrite` into
  // `groupBytes`, the rows alive while `owner` is. True where it takes them: the rows then stay
  // as they lie, ungrouped, until a later call with a cache that has them (Take). False: they are
  // rewritten now.
  virtual bool Defer(std::vector<const uint8_t*> /*sources*/, size_t /*groupBytes*/, RewriteRun /*rewrite*/,
                     std::shared_ptr<const void> /*owner*/) {
    return false;
  }
  // What Take gave does not match the rows: nothing more is taken from it.
  virtual void Reject(const std::string& why) = 0;
};

// A Linear layer's weight [N, K] and bias [N], packed in panels of 16 output columns
// (panel p holds W[16p .. 16p+15][k] for every k, column-interleaved), N padded to 16.
class PackedLinear {
 public:
  PackedLinear() = default;
  // weight: row-major [n, k], rounded to `type` (round to nearest even); bias: n values or null.
  PackedLinear(const float* weight, const float* bias, int n, int k, WeightType type = WeightType::F32);
  // The same from a weight stored as `source` (float32 values, or bf16 / fp16 bits): a 16-bit
  // weight packed to its own type is moved bit for bit, with no float32 copy of it on the way.
  PackedLinear(const void* weight, WeightType source, const float* bias, int n, int k, WeightType type);
  // The same from row blocks stacked on top of each other (q, k and v; gate and up): parts[i]
  // holds rows[i] rows of k values; n is their sum. No stacked copy is made on the way.
  PackedLinear(const std::vector<const void*>& parts, const std::vector<int>& rows, WeightType source,
               const float* bias, int n, int k, WeightType type);
  // A quantized weight read where it lies: rows[c] holds output column c's GGUF row of
  // types[c]; `owner` keeps that memory alive (the checkpoint's tensors). Nothing is copied.
  // Or a bf16 weight read where it lies: every types[c] BF16, rows[c] output column c's k
  // values (an even k).
  PackedLinear(std::vector<const uint8_t*> rows, std::vector<WeightType> types, std::shared_ptr<const void> owner,
               const float* bias, int n, int k);
  // Whether the rows are read where they lie (quantized, or bf16 rows in place).
  bool inPlace() const { return !rows_.empty(); }
  bool quantized() const { return inPlace() && type_ != WeightType::BF16; }
  const uint8_t* quantRow(int c) const { return rows_[c]; }
  const uint16_t* bf16Row(int c) const { return reinterpret_cast<const uint16_t*>(rows_[c]); }
  WeightType rowType(int c) const { return rowTypes_[c]; }
  int n() const { return n_; }
  int k() const { return k_; }
  int panels() const { return panels_; }
  WeightType type() const { return type_; }
  const float* panel(int p) const { return packed_.get() + static_cast<size_t>(p) * k_ * 16; }
  const uint16_t* halfPanel(int p) const { return halves_.get() + static_cast<size_t>(p) * k_ * 16; }
  const float* bias() const { return bias_.get(); }
  // Bytes of weights a step streams through this layer.
  size_t bytes() const {
    if (inPlace()) return quantBytes_;
    return static_cast<size_t>(panels_) * k_ * 16 * (type_ == WeightType::F32 ? 4 : 2);
  }
  // W[row][0 .. k) as floats: an embedding row read from a head tied to it, so the table is
  // held once (a lookup gathers k values, a few microseconds; a quantized row is dequantized).
  void Row(int row, float* out) const;
  // Rewrites the Q4_K rows, eight at a time, into the interleaved groups of InterleaveQ4KRows
  // (QuantKernels.h), where they lie: columns c..c+7 (c a multiple of 8) of type Q4_K whose
  // rows are consecutive in memory. The rows are the checkpoint's tensors, so only their sole
  // owner may call this (the native runtime once the module's weights are released, see
  // Stepper::OwnWeights); nothing else may read them as GGUF rows afterwards, and Row() of an
  // interleaved row throws (a table looked up by rows is not interleaved). Returns the number
  // of groups made. Every family's products read both layouts.
  // With a `cache`, the runs are taken from a layout an earlier load made where it has them (each
  // call's first, middle and last run compared with a rewrite of the rows first), else left to it
  // where it defers them (RegroupCache::Defer: 0 groups made, the rows as they lie), else made
  // here; the same holds for the calls below.
  int InterleaveQ4K(RegroupCache* cache = nullptr);
  // The same for the Q4_0 and Q5_0 rows (InterleaveBlock32Rows).
  int InterleaveBlock32(RegroupCache* cache = nullptr);
  // The same for the Q8_0 rows (InterleaveBlock32Rows; the avx2 and avx512 families' layout).
  int InterleaveQ8_0(RegroupCache* cache = nullptr);
  // The Q8_0 rows sixteen at a time into the tile panels of TileQ8_0Rows (the VNNI families'
  // layout), where they lie, under the same terms: columns c..c+15 (c a multiple of 16) of type
  // Q8_0 whose rows are consecutive in memory and not yet interleaved. Returns the panels made.
  int TileQ8_0(RegroupCache* cache = nullptr);
  // Whether column c is not a GGUF row: it lies in an interleaved group (quantRow(c - c % 8) is
  // then the group's, and rowType(c) its type) or in a tile panel (quantRow(c - c % 16)).
  bool grouped(int c) const { return !grouped_.empty() && grouped_[c] != 0; }
  bool tiled(int c) const { return !grouped_.empty() && grouped_[c] == 2; }
  // Interleaved groups (of eight), and Q8_0 tile panels (of sixteen).
  int groups() const { return groups_; }
  int tilePanels() const { return tiles_; }
  int groupsOf(WeightType t) const { return groupsOf_[static_cast<int>(t)]; }
  // Rows of a quantized type outside interleaved groups (a product's passes over the columns
  // run only for the types it has: the 128K-column head of a Llama 3 is all Q6_K).
  int rowsOf(WeightType t) const { return t == WeightType::Q5_K ? rowsOfQ5K_ : rowsOf_[static_cast<int>(t)]; }

 private:
  struct FreeHalves {
    void operator()(uint16_t* p) const;
  };
  int n_ = 0, k_ = 0, panels_ = 0;
  WeightType type_ = WeightType::F32;
  AlignedFloats packed_;
  std::unique_ptr<uint16_t[], FreeHalves> halves_;
  AlignedFloats bias_;
  std::vector<const uint8_t*> rows_;
  std::vector<WeightType> rowTypes_;
  size_t quantBytes_ = 0;
  std::shared_ptr<const void> owner_;
  // Last, so that a build of the kernels from before them (kernels-ab.sh's base) still reads
  // the members above where they are.
  std::vector<uint8_t> grouped_;
  int groups_ = 0;
  int rowsOf_[8] = {};  // by WeightType, but Q5_K's: rowsOfQ5K_
  int groupsOf_[8] = {};
  int tiles_ = 0;
  // Rows regrouped out of a mapping of the checkpoint (Regroup writes them here), or taken from a
  // layout file.
  std::vector<std::shared_ptr<const void>> regrouped_;
  int rowsOfQ5K_ = 0;  // after everything a build from before Q5_K reads

  int Interleave(WeightType type, RegroupCache* cache);
  // The rows of `type` `width` at a time (columns c..c+width-1, c a multiple of width, whose rows
  // are consecutive in memory and in no group yet), each run rewritten by `rewrite` and marked
  // `mark` in grouped_ (1 a group, 2 a tile panel): in place, or where the rows lie in a mapping
  // of the checkpoint (common/MappedFile.h) in a block of its own, the rows' pages then given
  // back; or taken from `cache`, or deferred to it (see InterleaveQ4K). Returns the runs made.
  template <typename Rewrite>
  int Regroup(WeightType type, int width, uint8_t mark, Rewrite rewrite, RegroupCache* cache);
};

// "float32" -> F32, "bfloat16" -> BF16, "float16" -> F16 (config.json "dtype"); "q8_0",
// "q4_k", "q6_k", "q4_0", "q5_0", "q5_k" -> Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K (a quantized
// module's qtype);
// anything else -> F32 (a qtype of that is not one the native runtime implements).
WeightType WeightTypeOf(const std::string& dtype);

// IEEE half and bfloat16 conversions (round to nearest even), for packing and tests.
uint16_t FloatToBf16(float value);
uint16_t FloatToHalf(float value);
float HalfToFloatRare(uint16_t half);  // zero, subnormals, infinities and NaN (HalfToFloat)
inline float HalfToFloat(uint16_t half) {
  const uint32_t exponent = half & 0x7c00u;
  if (exponent == 0 || exponent == 0x7c00u) return HalfToFloatRare(half);
  // A normal number (every scale a quantized block holds but zero): the exponent rebased from
  // 15 to 127 and the mantissa moved up, exactly. Inline: the baseline family converts each
  // quantized block's scale here (an out-of-line call, then ldexp, was 8% of its decode step).
  const uint32_t bits = (static_cast<uint32_t>(half & 0x8000u) << 16) | ((static_cast<uint32_t>(half & 0x7fffu) << 13) + (112u << 23));
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

enum class Epilogue {
  Store,      // Y = X W^T + b
  Accumulate, // Y += X W^T + b   (residual connections)
  GeluTanh,   // Y = gelu_tanh(X W^T + b)
  GeluErf,    // Y = gelu_erf(X W^T + b)
};

// Score rows of attention scratch a KernelSet::attendHeads call may use (the most (query, head)
// items any family attends to at once).
constexpr int kAttendScratchRows = 12;

// One instruction-set family of the kernels: every copy computes the same functions, so a
// stepper holds a reference to one set and calls through it.
struct KernelSet {
  const char* name;  // "amx", "avx512_bf16", "avx512", "avx2" or "baseline"

  // Y[m, 16*p0 .. 16*p1) for m < rows. Only the first `n` columns of Y are written.
  void (*linearPanels)(const float* x, int rows, int ldx, const PackedLinear& w, float* y, int ldy, int p0, int p1,
                       Epilogue epilogue);

  // out[m] = LayerNorm(x[m]) * gamma + beta over `width` features, for m < rows.
  void (*layerNormRows)(const float* x, int rows, int ld, int width, const float* gamma, const float* beta,
                        float eps, float* out, int ldo);

  // out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * gamma (RMSNorm), for m < rows.
  void (*rmsNormRows)(const float* x, int rows, int ld, int width, const float* gamma, float eps, float* out,
                      int ldo);

  // out[m][i] = silu(g[m][i]) * g[m][width + i] (SwiGLU over a fused gate|up product), m < rows.
  void (*swiGlu)(const float* g, int rows, int ldg, int width, float* out, int ldo);

  // Causal attention of `heads` query heads sharing one kv head, for `queries` new tokens at
  // positions first..first+queries-1: query head g of token t is q[t * ldq + g * hd] (hd
  // floats) and its output out[t * ldo + g * hd]; keys in tiles of 16 positions, each tile
  // dim-major (keyTiles[(p / 16) * hd * 16 + d * 16 + p % 16]: the scores of 16 keys come from
  // one contiguous tile, with no horizontal sums); values v[p * hd + d]; positions 0..first+t
  // visible to token t. scratch holds at least kAttendScratchRows x (first+queries rounded up
  // to 16) floats. keyTiles and v hold the cache's element type `cache` (float32, bf16 or
  // fp16; see KvCache). Each output is computed in the same order whatever the other tokens
  // and heads of the call.
  void (*attendHeads)(const float* q, int ldq, int heads, int queries, int first, const void* keyTiles, const void* v,
                     WeightType cache, int hd, float scale, float* out, int ldo, float* scratch);
};

// The best family this CPU runs, capped at `cap`: "auto" (no cap), "amx" (avx512_bf16, with Q8_0
// weights in tile panels: AMX tiles for the products of many rows), "avx512_bf16" (AVX-512 with the bf16 dot
// products), "avx512" (16-bit weights widened to float), "avx2" or "baseline"
// (SERVICE_KERNELS). A cap above what the CPU has gives what it has; an unknown
// name throws CodedError(ERR_INVALID_ARGUMENT).
const KernelSet& SelectKernels(const std::string& cap);

// Whether the native runtime's `family` rewrites rows of `type` into a layout of its own at load
// (DecoderStepper::OwnWeights): Q8_0, Q4_0 and Q5_0 on every SIMD family, Q4_K on avx2 and, on
// Intel CPUs, on the AVX-512 families too. Such
// rows are read into memory rather than from a mapping of the checkpoint (a rewrite of mapped
// rows costs a fresh page each).
bool FamilyRegroups(const KernelSet& family, WeightType type);

// The families this CPU can run, best first (tests run the native runtime under each).
std::vector<std::string> SupportedKernelFamilies();

// Whether this CPU runs the AVX-512 families (read once). Besides choosing a family, it gates
// the far software prefetches of the one-row products, which were measured to gain on AVX-512
// CPUs and to lose on an AVX2-only one, whatever family runs.
bool CpuHasAvx512();

// Whether this CPU is Intel's (read once): the avx2 family's interleaved Q4_K products then
// load each row's activations where AMD's run faster shuffling them out (DotQ4KGroup), and the
// AVX-512 families interleave Q4_K rows too (FamilyRegroups). SERVICE_CPU_VENDOR=intel or amd
// picks one vendor's variants whatever the CPU ("auto" or unset: the CPU's own). Either
// variant runs on any CPU of the family: they differ in speed, not in instructions.
bool CpuIsIntel();

}  // namespace tsn
