#include "Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ErrorCodes.h"
#include "Errors.h"

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

bool HasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

#define TSN_KERNEL_SET(ns) KernelSet{#ns, &ns::LinearPanels, &ns::LayerNormRows, &ns::AttendHead}
const KernelSet kAvx512 = TSN_KERNEL_SET(avx512);
const KernelSet kAvx2 = TSN_KERNEL_SET(avx2);
const KernelSet kBaseline = TSN_KERNEL_SET(baseline);
#undef TSN_KERNEL_SET

}  // namespace

const KernelSet& SelectKernels(const std::string& cap) {
  if (cap != "auto" && cap != "avx512" && cap != "avx2" && cap != "baseline") {
    throw CodedError(ErrorCode::kInvalidArgument,
                     "kernels must be \"auto\", \"avx512\", \"avx2\" or \"baseline\", got \"" + cap + "\"");
  }
  if ((cap == "auto" || cap == "avx512") && HasAvx512()) return kAvx512;
  if (cap != "baseline" && HasAvx2()) return kAvx2;
  return kBaseline;
}

std::vector<std::string> SupportedKernelFamilies() {
  std::vector<std::string> families;
  if (HasAvx512()) families.push_back("avx512");
  if (HasAvx2()) families.push_back("avx2");
  families.push_back("baseline");
  return families;
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

}  // namespace tsn
