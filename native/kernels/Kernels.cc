#include "kernels/Kernels.h"
#include "kernels/QuantKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <immintrin.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <new>
#include <stdexcept>
#include <utility>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "common/MappedFile.h"
#include "common/Parallel.h"
#include "kernels/QuantKernels.h"
#include "kernels/ThreadTeam.h"

#define TSN_INLINE inline __attribute__((always_inline))
#define TSN_NOINLINE __attribute__((noinline))

// One copy of the kernels per instruction set. Each tile function is its own (non-inlined)
// function: inlined into one large function, GCC stops keeping the accumulators in registers.
// avx512_bf16 differs from avx512 only in how bf16 weights are multiplied (TSN_DPBF16:
// vdpbf16ps on bf16-rounded activations instead of widening the weights to float).
// The many-row tile (rows x 16-column panels) per family, sized to its vector registers
// (see Block in KernelsBody.inc).
#define TSN_F16C
#define TSN_DPBF16
#define TSN_VECTOR_BYTES 64
#define TSN_TILE_ROWS 8
#define TSN_TILE_PANELS 2
#define TSN_ROW_PANELS 4
#define TSN_FEW_ROWS 0
// GCC's own _mm512_cvtph_ps starts from an undefined vector, which -Wall reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c,bmi2")
namespace tsn::avx512_bf16 {
#include "kernels/KernelsBody.inc"
}  // namespace tsn::avx512_bf16
// amx is avx512_bf16 with Q8_0 weights in tile panels, AMX tiles for the products of many rows (QuantKernels.cc);
// its float and 16-bit kernels are avx512_bf16's, compiled again so that its LinearPanels calls
// its own QuantLinearPanels.
namespace tsn::amx {
#include "kernels/KernelsBody.inc"
}  // namespace tsn::amx
#pragma GCC pop_options
#undef TSN_DPBF16

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c,bmi2")
namespace tsn::avx512 {
#include "kernels/KernelsBody.inc"
}  // namespace tsn::avx512
#pragma GCC pop_options
#pragma GCC diagnostic pop

#undef TSN_TILE_ROWS
#undef TSN_TILE_PANELS
#undef TSN_VECTOR_BYTES
#define TSN_VECTOR_BYTES 32
#define TSN_TILE_ROWS 6
#define TSN_TILE_PANELS 1
#undef TSN_FEW_ROWS
#define TSN_FEW_ROWS 2
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace tsn::avx2 {
#include "kernels/KernelsBody.inc"
}  // namespace tsn::avx2
#pragma GCC pop_options
#undef TSN_F16C

#undef TSN_TILE_ROWS
#undef TSN_TILE_PANELS
#undef TSN_ROW_PANELS
#undef TSN_VECTOR_BYTES
#define TSN_VECTOR_BYTES 16
#define TSN_TILE_ROWS 2
#define TSN_TILE_PANELS 1
#define TSN_ROW_PANELS 2
#undef TSN_FEW_ROWS
#define TSN_FEW_ROWS 0
namespace tsn::baseline {
#include "kernels/KernelsBody.inc"
}  // namespace tsn::baseline

namespace tsn {

namespace {

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

bool HasAvx512Bf16() {
  __builtin_cpu_init();
  // VNNI too: the family's quantized products use it (every AVX512_BF16 CPU has it).
  return HasAvx512() && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
}

// AMX: the CPU's tiles and int8 products, and the kernel's leave to use them. Linux hands the
// tile state (8 KB a thread) to a process only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
// XTILEDATA); without it the first tile instruction raises SIGILL. Asked once, for the
// process, before any tile instruction runs (SelectKernels returns the family only after).
bool HasAmx() {
  static const bool has = [] {
    __builtin_cpu_init();
    if (!HasAvx512Bf16() || !__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-int8")) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return has;
}

bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

#define TSN_KERNEL_SET(ns) \
  KernelSet{#ns, &ns::LinearPanels, &ns::LayerNormRows, &ns::RmsNormRows, &ns::SwiGlu, &ns::AttendHeads}
const KernelSet kAmx = TSN_KERNEL_SET(amx);
const KernelSet kAvx512Bf16 = TSN_KERNEL_SET(avx512_bf16);
const KernelSet kAvx512 = TSN_KERNEL_SET(avx512);
const KernelSet kAvx2 = TSN_KERNEL_SET(avx2);
const KernelSet kBaseline = TSN_KERNEL_SET(baseline);
#undef TSN_KERNEL_SET

}  // namespace

const KernelSet& SelectKernels(const std::string& cap) {
  if (cap != "auto" && cap != "amx" && cap != "avx512_bf16" && cap != "avx512" && cap != "avx2" && cap != "baseline") {
    throw CodedError(ErrorCode::kInvalidArgument,
                     "kernels must be \"auto\", \"amx\", \"avx512_bf16\", \"avx512\", \"avx2\" or \"baseline\", got \"" +
                         cap + "\"");
  }
  const bool toAvx512Bf16 = cap == "auto" || cap == "amx" || cap == "avx512_bf16";
  if ((cap == "auto" || cap == "amx") && HasAmx()) return kAmx;
  if (toAvx512Bf16 && HasAvx512Bf16()) return kAvx512Bf16;
  if ((toAvx512Bf16 || cap == "avx512") && HasAvx512()) return kAvx512;
  if (cap != "baseline" && HasAvx2()) return kAvx2;
  return kBaseline;
}

std::vector<std::string> SupportedKernelFamilies() {
  std::vector<std::string> families;
  if (HasAmx()) families.push_back("amx");
  if (HasAvx512Bf16()) families.push_back("avx512_bf16");
  if (HasAvx512()) families.push_back("avx512");
  if (HasAvx2()) families.push_back("avx2");
  families.push_back("baseline");
  return families;
}

bool CpuHasAvx512() {
  static const bool has = HasAvx512();
  return has;
}

bool CpuIsIntel() {
  static const bool intel = [] {
    // SERVICE_CPU_VENDOR (the server checks its value before loading anything): the other
    // vendor's variants on this CPU, so that either can be timed or tested on one machine.
    const char* vendor = std::getenv("SERVICE_CPU_VENDOR");
    if (vendor != nullptr && std::strcmp(vendor, "intel") == 0) return true;
    if (vendor != nullptr && std::strcmp(vendor, "amd") == 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
}

void AdviseHugePages(void* memory, size_t bytes) {
  // Only whole 2 MiB pages inside the block; the kernel backs them with huge pages where
  // transparent huge pages are enabled ("always" or "madvise"), else this does nothing.
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(memory) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(memory) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

namespace {

// 64-byte aligned memory. A block of many megabytes that is written whole at once (a packed
// weight) is 2 MiB aligned and advised onto huge pages before it is first written: packing a
// 1B model's weights touched ~600k fresh 4 KiB pages, and the page faults cost more than the
// copying.
void* AllocateAligned(size_t bytes, bool whole) {
  const bool huge = whole && bytes >= (size_t{8} << 20);
  void* memory = nullptr;
  if (posix_memalign(&memory, huge ? size_t{2} << 20 : 64, bytes) != 0) throw std::bad_alloc();
  if (huge) AdviseHugePages(memory, bytes);
  return memory;
}

}  // namespace

void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

void AlignedFloats::Resize(size_t count, bool whole) {
  if (count <= size && data) return;
  data.reset(static_cast<float*>(AllocateAligned(std::max<size_t>(count, 16) * sizeof(float), whole)));
  size = count;
}

void PackedLinear::FreeHalves::operator()(uint16_t* p) const { std::free(p); }

PackedLinear::PackedLinear(const float* weight, const float* bias, int n, int k, WeightType type)
    : PackedLinear(weight, WeightType::F32, bias, n, k, type) {}

namespace {

// Element (col, kk) of a row-major [n, k] weight stored as `source`, as a float.
float SourceValue(const void* weight, WeightType source, size_t at) {
  switch (source) {
    case WeightType::F32: return static_cast<const float*>(weight)[at];
    case WeightType::BF16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(weight)[at]) << 16;
      float value;
      std::memcpy(&value, &bits, 4);
      return value;
    }
    case WeightType::F16: return HalfToFloat(static_cast<const uint16_t*>(weight)[at]);
    default: return 0;  // quantized weights are never packed from values (the other constructor)
  }
}

}  // namespace

PackedLinear::PackedLinear(const void* weight, WeightType source, const float* bias, int n, int k, WeightType type)
    : PackedLinear(std::vector<const void*>{weight}, std::vector<int>{n}, source, bias, n, k, type) {}

PackedLinear::PackedLinear(const std::vector<const void*>& parts, const std::vector<int>& rows, WeightType source,
                           const float* bias, int n, int k, WeightType type)
    : n_(n), k_(k), panels_((n + 15) / 16), type_(type) {
  if (type != WeightType::F32 && k % 2 != 0) {
    throw CodedError(ErrorCode::kCheckpointInterface, "16-bit weights need an even input width, got " + std::to_string(k));
  }
  // Where output column col's k source values start: row col - first of the part holding it.
  const size_t sourceBytes = source == WeightType::F32 ? 4 : 2;
  std::vector<const void*> columnSource(static_cast<size_t>(n), nullptr);
  {
    int col = 0;
    for (size_t i = 0; i < parts.size() && i < rows.size(); ++i) {
      for (int r = 0; r < rows[i] && col < n; ++r, ++col) {
        columnSource[col] = static_cast<const char*>(parts[i]) + static_cast<size_t>(r) * k * sourceBytes;
      }
    }
    if (col != n) throw CodedError(ErrorCode::kCheckpointInterface, "stacked weight parts do not add up to its rows");
  }
  bias_.Resize(static_cast<size_t>(panels_) * 16);
  std::memset(bias_.get(), 0, sizeof(float) * bias_.size);
  if (bias) std::memcpy(bias_.get(), bias, sizeof(float) * n);
  const size_t count = static_cast<size_t>(panels_) * k * 16;
  // Every value of a full panel is written below; only the last panel's padding columns are
  // zeroed here (a memset of the whole block was one more pass over it).
  const size_t lastPanel = static_cast<size_t>(panels_ - 1) * k * 16;
  if (type == WeightType::F32) {
    packed_.Resize(count, true);
    std::memset(packed_.get() + lastPanel, 0, sizeof(float) * (count - lastPanel));
    SplitAcrossThreads(panels_, count * sizeof(float), [&](int64_t firstPanel, int64_t endPanel) {
      for (int col = static_cast<int>(firstPanel) * 16; col < std::min<int64_t>(n, endPanel * 16); ++col) {
        float* panel = packed_.get() + static_cast<size_t>(col / 16) * k * 16 + col % 16;
        for (int kk = 0; kk < k; ++kk) panel[kk * 16] = SourceValue(columnSource[col], source, kk);
      }
    });
    return;
  }
  halves_.reset(static_cast<uint16_t*>(AllocateAligned(std::max<size_t>(count, 32) * sizeof(uint16_t), true)));
  std::memset(halves_.get() + lastPanel, 0, sizeof(uint16_t) * (count - lastPanel));
  // Panel by panel, writing each in order while reading its 16 rows side by side; ranges of
  // panels on several threads for a large matrix.
  SplitAcrossThreads(panels_, count * sizeof(uint16_t), [&](int64_t firstPanel, int64_t endPanel) {
    for (int p = static_cast<int>(firstPanel); p < endPanel; ++p) {
      uint16_t* panel = halves_.get() + static_cast<size_t>(p) * k * 16;
      const int columns = std::min(16, n - p * 16);
      if (type == WeightType::BF16 && source == WeightType::BF16 && columns == 16 && k % 8 == 0) {
        // A bf16 pair (k, k + 1) of a row is one 32-bit word of the panel: four pairs of four
        // rows at a time, transposed in SSE2 registers, so the panel is written in whole
        // 16-byte pieces in order. A 4-byte store every 64 bytes, a row at a time (the loop
        // below) ran at 1.8-2.0 GB/s on one core; this at 4.8-6.2 (an 8192 x 2048 matrix, the
        // destination's pages already faulted in).
        const uint32_t* rows[16];
        for (int c = 0; c < 16; ++c) rows[c] = static_cast<const uint32_t*>(columnSource[p * 16 + c]);
        auto* out = reinterpret_cast<float*>(panel);
        const auto load = [&](int c, int j) { return _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[c] + j))); };
        for (int j = 0; j < k / 2; j += 4) {
          for (int c = 0; c < 16; c += 4) {
            __m128 a = load(c, j), b = load(c + 1, j), d = load(c + 2, j), e = load(c + 3, j);
            _MM_TRANSPOSE4_PS(a, b, d, e);
            float* at = out + static_cast<size_t>(j) * 16 + c;
            _mm_storeu_ps(at, a);
            _mm_storeu_ps(at + 16, b);
            _mm_storeu_ps(at + 32, d);
            _mm_storeu_ps(at + 48, e);
          }
        }
        continue;
      }
      for (int c = 0; c < columns; ++c) {
        const void* row = columnSource[p * 16 + c];
        const auto* bits = static_cast<const uint16_t*>(row);
        if (type == WeightType::BF16 && source == WeightType::BF16) {
          // A bf16 pair (k, k + 1) of a row is one 32-bit word of the panel.
          auto* out = reinterpret_cast<uint32_t*>(panel) + c;
          uint32_t pair;
          for (int kk = 0; kk < k; kk += 2) {
            std::memcpy(&pair, bits + kk, 4);
            out[(kk / 2) * 16] = pair;
          }
        } else if (type == WeightType::BF16) {
          uint16_t* out = panel + c * 2;
          for (int kk = 0; kk < k; ++kk) out[(kk / 2) * 32 + kk % 2] = FloatToBf16(SourceValue(row, source, kk));
        } else if (source == WeightType::F16) {
          for (int kk = 0; kk < k; ++kk) panel[kk * 16 + c] = bits[kk];
        } else {
          for (int kk = 0; kk < k; ++kk) panel[kk * 16 + c] = FloatToHalf(SourceValue(row, source, kk));
        }
      }
    }
  });
}

void PackedLinear::Row(int row, float* out) const {
  const size_t base = static_cast<size_t>(row / 16) * k_ * 16;
  const int c = row % 16;
  if (grouped(row)) throw std::logic_error("PackedLinear::Row of an interleaved row: a looked-up table is not interleaved");
  if (inPlace() && type_ == WeightType::BF16) {
    for (int kk = 0; kk < k_; ++kk) out[kk] = SourceValue(bf16Row(row), WeightType::BF16, kk);
    return;
  }
  if (quantized()) {
    DequantizeRow(rowTypes_[row], rows_[row], k_, out);
    return;
  }
  switch (type_) {
    case WeightType::F32:
      for (int kk = 0; kk < k_; ++kk) out[kk] = packed_.get()[base + kk * 16 + c];
      return;
    case WeightType::BF16:
      for (int kk = 0; kk < k_; ++kk) {
        const uint32_t bits = static_cast<uint32_t>(halves_.get()[base + (kk / 2) * 32 + c * 2 + kk % 2]) << 16;
        std::memcpy(out + kk, &bits, 4);
      }
      return;
    case WeightType::F16:
      for (int kk = 0; kk < k_; ++kk) out[kk] = HalfToFloat(halves_.get()[base + kk * 16 + c]);
      return;
    default:
      return;
  }
}

PackedLinear::PackedLinear(std::vector<const uint8_t*> rows, std::vector<WeightType> types,
                           std::shared_ptr<const void> owner, const float* bias, int n, int k)
    : n_(n), k_(k), panels_((n + 15) / 16), rows_(std::move(rows)), rowTypes_(std::move(types)), owner_(std::move(owner)) {
  if (n <= 0 || static_cast<int>(rows_.size()) != n || static_cast<int>(rowTypes_.size()) != n) {
    throw CodedError(ErrorCode::kCheckpointInterface, "a weight read in place needs one row per output");
  }
  type_ = rowTypes_[0];
  if (type_ == WeightType::BF16) {
    for (WeightType t : rowTypes_) {
      if (t != WeightType::BF16) throw CodedError(ErrorCode::kCheckpointInterface, "bf16 rows in place mix in another type");
    }
    if (k % 2 != 0) {
      throw CodedError(ErrorCode::kCheckpointInterface, "16-bit weights need an even input width, got " + std::to_string(k));
    }
    quantBytes_ = static_cast<size_t>(n) * k * sizeof(uint16_t);
  } else {
    for (WeightType t : rowTypes_) {
      if (!IsQuantized(t)) {
        throw CodedError(ErrorCode::kCheckpointInterface, "a quantized weight has a row of a float type");
      }
      if (k % BlockValues(t) != 0) {
        throw CodedError(ErrorCode::kCheckpointInterface, "a quantized weight's input width " + std::to_string(k) +
                                                              " is not a multiple of its block of " +
                                                              std::to_string(BlockValues(t)));
      }
      quantBytes_ += RowBytes(t, k);
      ++(t == WeightType::Q5_K ? rowsOfQ5K_ : rowsOf_[static_cast<int>(t)]);
    }
  }
  bias_.Resize(static_cast<size_t>(panels_) * 16);
  std::memset(bias_.get(), 0, sizeof(float) * bias_.size);
  if (bias) std::memcpy(bias_.get(), bias, sizeof(float) * n);
}

int PackedLinear::InterleaveQ4K(RegroupCache* cache) { return Interleave(WeightType::Q4_K, cache); }

int PackedLinear::InterleaveBlock32(RegroupCache* cache) {
  return Interleave(WeightType::Q4_0, cache) + Interleave(WeightType::Q5_0, cache);
}

int PackedLinear::InterleaveQ8_0(RegroupCache* cache) { return Interleave(WeightType::Q8_0, cache); }

int PackedLinear::Interleave(WeightType type, RegroupCache* cache) {
  if (!quantized() || groupsOf_[static_cast<int>(type)] > 0) return 0;
  const int groups = Regroup(
      type, kQ4KGroupRows, 1,
      // By value, not `this`: a deferred run is rewritten on the layout writer's thread.
      [k = k_, type](const uint8_t* from, uint8_t* to) {
        if (type == WeightType::Q4_K) {
          InterleaveQ4KRows(from, to, k / 256);
        } else {
          InterleaveBlock32Rows(type, from, to, k / 32);
        }
      },
      cache);
  groups_ += groups;
  groupsOf_[static_cast<int>(type)] = groups;
  return groups;
}

int PackedLinear::TileQ8_0(RegroupCache* cache) {
  if (!quantized() || tiles_ > 0) return 0;
  tiles_ = Regroup(
      WeightType::Q8_0, kQ8_0TileRows, 2, [k = k_](const uint8_t* from, uint8_t* to) { TileQ8_0Rows(from, to, k / 32); },
      cache);
  return tiles_;
}

namespace {

// Gives back the pages of the source rows of `starts` (runs of `bytes`), merged where they
// touch so the pages between two runs go too: rows now read from elsewhere.
void ForgetRuns(const std::vector<const uint8_t*>& starts, size_t bytes) {
  std::vector<std::pair<const uint8_t*, const uint8_t*>> runs;
  for (const uint8_t* start : starts) runs.emplace_back(start, start + bytes);
  std::sort(runs.begin(), runs.end());
  for (size_t i = 0; i < runs.size();) {
    size_t j = i + 1;
    const uint8_t* end = runs[i].second;
    while (j < runs.size() && runs[j].first <= end) end = std::max(end, runs[j++].second);
    ForgetPages(runs[i].first, static_cast<size_t>(end - runs[i].first));
    i = j;
  }
}

}  // namespace

template <typename Rewrite>
int PackedLinear::Regroup(WeightType type, int width, uint8_t mark, Rewrite rewrite, RegroupCache* cache) {
  const size_t rowBytes = RowBytes(type, k_);
  if (grouped_.empty()) grouped_.assign(n_, 0);
  std::vector<int> starts;
  for (int c = 0; c + width <= n_; c += width) {
    bool fits = true;
    for (int j = 0; j < width && fits; ++j) {
      fits = rowTypes_[c + j] == type && rows_[c + j] == rows_[c] + rowBytes * j && grouped_[c + j] == 0;
    }
    if (fits) starts.push_back(c);
  }
  if (starts.empty()) return 0;
  const size_t groupBytes = static_cast<size_t>(width) * rowBytes;
  std::vector<const uint8_t*> sources;
  for (int c : starts) sources.push_back(rows_[c]);
  // The runs marked as regrouped; then (repoint) their rows read from `block` on.
  const auto claim = [&] {
    for (int c : starts) std::fill(grouped_.begin() + c, grouped_.begin() + c + width, mark);
    rowsOf_[static_cast<int>(type)] -= width * static_cast<int>(starts.size());
  };
  const auto repoint = [&](const uint8_t* block) {
    claim();
    for (size_t i = 0; i < starts.size(); ++i) {
      for (int j = 0; j < width; ++j) rows_[starts[i] + j] = block + i * groupBytes + j * rowBytes;
    }
  };
  std::shared_ptr<const void> owner;
  if (const uint8_t* laid = cache ? cache->Take(starts.size() * groupBytes, &owner) : nullptr) {
    // A layout an earlier load made: its first, middle and last run must be these rows' rewrite
    // (a file of another layout, or damaged there, is set aside and the rows rewritten below).
    std::unique_ptr<uint8_t, decltype(&std::free)> scratch(static_cast<uint8_t*>(AllocateAligned(groupBytes, false)),
                                                           std::free);
    bool same = true;
    for (size_t i : {size_t{0}, starts.size() / 2, starts.size() - 1}) {
      rewrite(sources[i], scratch.get());
      same = same && std::memcmp(scratch.get(), laid + i * groupBytes, groupBytes) == 0;
    }
    if (same) {
      ForgetRuns(sources, groupBytes);
      repoint(laid);
      regrouped_.push_back(std::move(owner));
      return static_cast<int>(starts.size());
    }
    cache->Reject("a " + std::to_string(n_) + "x" + std::to_string(k_) + " matrix's runs differ from its rows' rewrite");
  } else if (cache && cache->Defer(sources, groupBytes, RewriteRun(rewrite), owner_)) {
    return 0;
  }
  if (!InMappedFile(sources[0])) {
    // Each group rewrites its own rows in place, so a large matrix's groups go to several
    // threads (a 1B Q8_0 checkpoint's tile panels took 0.25-0.37 s of a load on one).
    SplitAcrossThreads(static_cast<int64_t>(starts.size()), starts.size() * groupBytes, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        uint8_t* rows = const_cast<uint8_t*>(sources[i]);
        rewrite(rows, rows);
      }
    });
    claim();
    return static_cast<int>(starts.size());
  }
  // Rows in a mapping of the checkpoint that no layout file holds or will hold (a type the load
  // did not expect this family to rewrite, a layout file set aside, or none to be written): read
  // where they lie and written in the new layout into fresh memory, one pass. A write in the
  // mapping would copy each 4 KiB page on its first store (1B Q8_0: 1.1-1.4 s in place), and
  // would race a lease break's copy.
  std::shared_ptr<uint8_t> block(static_cast<uint8_t*>(AllocateAligned(starts.size() * groupBytes, true)), std::free);
  SplitAcrossThreads(static_cast<int64_t>(starts.size()), starts.size() * groupBytes, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) rewrite(sources[i], block.get() + i * groupBytes);
  });
  ForgetRuns(sources, groupBytes);
  repoint(block.get());
  regrouped_.push_back(std::move(block));
  return static_cast<int>(starts.size());
}

bool FamilyRegroups(const KernelSet& family, WeightType type) {
  const std::string name = family.name;
  if (name == "baseline") return false;
  // Q4_K: avx2 everywhere; the AVX-512 families on Intel CPUs, where their group kernel
  // (DotQ4KGroupPair) was measured ahead of the rows' pair kernels. On Zen 5 the rows' kernels
  // beat the 256-bit groups from two rows up, and the 512-bit ones have not run on AMD.
  if (type == WeightType::Q4_K) return name == "avx2" || CpuIsIntel();
  return IsBlock32(type);
}

WeightType WeightTypeOf(const std::string& dtype) {
  if (dtype == "q8_0") return WeightType::Q8_0;
  if (dtype == "q4_k") return WeightType::Q4_K;
  if (dtype == "q6_k") return WeightType::Q6_K;
  if (dtype == "q4_0") return WeightType::Q4_0;
  if (dtype == "q5_0") return WeightType::Q5_0;
  if (dtype == "q5_k") return WeightType::Q5_K;
  if (dtype == "bfloat16") return WeightType::BF16;
  if (dtype == "float16") return WeightType::F16;
  return WeightType::F32;
}

uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

uint16_t FloatToHalf(float value) {
  // F16C's conversion rounds to nearest even; done in software here so packing needs no F16C.
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const uint32_t magnitude = bits & 0x7fffffff;
  if (magnitude > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);
  if (magnitude >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504: infinity
  if (magnitude < 0x38800000) {  // a half subnormal (or zero): round value * 2^24 to an integer
    float scaled;
    uint32_t m = magnitude;
    std::memcpy(&scaled, &m, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled * 16777216.0f)));
  }
  const uint32_t rounded = magnitude + 0xfff + ((magnitude >> 13) & 1);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

float HalfToFloatRare(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t magnitude = half & 0x7fff;
  uint32_t bits;
  if (magnitude >= 0x7c00) {
    bits = sign | 0x7f800000 | ((magnitude & 0x3ff) << 13);
  } else {
    float value = static_cast<float>(magnitude >> 10 ? (0x400 | (magnitude & 0x3ff)) : magnitude) *
                  std::ldexp(1.0f, static_cast<int>(magnitude >> 10 ? (magnitude >> 10) - 25 : -24));
    std::memcpy(&bits, &value, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace tsn
