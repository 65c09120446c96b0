#include "Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#define TSN_INLINE inline __attribute__((always_inline))
#define TSN_NOINLINE __attribute__((noinline))

// One copy of the kernels per instruction set. Each tile function is its own (non-inlined)
// function: inlined into one large function, GCC stops keeping the accumulators in registers.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,bmi2")
namespace tsn::avx512 {
#include "KernelsBody.inc"
}  // namespace tsn::avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace tsn::avx2 {
#include "KernelsBody.inc"
}  // namespace tsn::avx2
#pragma GCC pop_options

namespace tsn::baseline {
#include "KernelsBody.inc"
}  // namespace tsn::baseline

namespace tsn {

namespace {

enum class Isa { Avx512, Avx2, Baseline };

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return Isa::Avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
  return Isa::Baseline;
}

const Isa kIsa = DetectIsa();

}  // namespace

const char* KernelIsa() {
  switch (kIsa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "baseline";
  }
}

void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

void AlignedFloats::Resize(size_t count) {
  if (count <= size && data) return;
  void* memory = nullptr;
  if (posix_memalign(&memory, 64, std::max<size_t>(count, 16) * sizeof(float)) != 0) throw std::bad_alloc();
  data.reset(static_cast<float*>(memory));
  size = count;
}

PackedLinear::PackedLinear(const float* weight, const float* bias, int n, int k)
    : n_(n), k_(k), panels_((n + 15) / 16) {
  packed_.Resize(static_cast<size_t>(panels_) * k * 16);
  bias_.Resize(static_cast<size_t>(panels_) * 16);
  std::memset(packed_.get(), 0, sizeof(float) * packed_.size);
  std::memset(bias_.get(), 0, sizeof(float) * bias_.size);
  for (int col = 0; col < n; ++col) {
    float* panel = packed_.get() + static_cast<size_t>(col / 16) * k * 16 + col % 16;
    for (int kk = 0; kk < k; ++kk) panel[kk * 16] = weight[static_cast<size_t>(col) * k + kk];
    if (bias) bias_.get()[col] = bias[col];
  }
}

#define TSN_DISPATCH(call)                     \
  switch (kIsa) {                              \
    case Isa::Avx512: return avx512::call;     \
    case Isa::Avx2: return avx2::call;         \
    default: return baseline::call;            \
  }

void LinearPanels(const float* x, int rows, int ldx, const PackedLinear& w, float* y, int ldy, int p0, int p1,
                  Epilogue epilogue) {
  TSN_DISPATCH(LinearPanels(x, rows, ldx, w, y, ldy, p0, p1, epilogue))
}

void LayerNormRows(const float* x, int rows, int ld, int width, const float* gamma, const float* beta, float eps,
                   float* out, int ldo) {
  TSN_DISPATCH(LayerNormRows(x, rows, ld, width, gamma, beta, eps, out, ldo))
}

void AttendHead(const float* q, int ldq, int queries, int first, const float* kt, int ldk, const float* v, int hd,
                float scale, float* out, int ldo, float* scratch) {
  TSN_DISPATCH(AttendHead(q, ldq, queries, first, kt, ldk, v, hd, scale, out, ldo, scratch))
}

}  // namespace tsn
