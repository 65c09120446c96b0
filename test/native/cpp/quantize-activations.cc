// Every kernel family's quantization of activation rows (QuantizeRowsQ8 / QuantizeRowsQ8K in
// kernels/QuantKernelsBody.inc) against the scalar QuantizeRowQ8 / QuantizeRowQ8K, byte for
// byte: scales, values and the Q8_K sums. The vector forms must give the same bytes, or a
// family's products would no longer be llama.cpp's integers. Cases: normal values at three
// magnitudes, zero and negative-zero blocks, ties for the largest magnitude (either sign
// first), values on .5 (rounding ties), NaN and infinities, and rows read at a stride.
// Built and run by quantizeActivations.test.ts; prints one line per family, exits 1 on a
// difference. Families the CPU cannot run are reported as skipped.
#include "kernels/QuantKernels.cc"

#include <cmath>
#include <cstdio>
#include <random>

namespace {

using Rows8 = void (*)(const float*, int, int, int, tsn::BlockQ8*);
using Rows8K = void (*)(const float*, int, int, int, tsn::BlockQ8K*);

int Check(const char* name, Rows8 rows8, Rows8K rows8k) {
  std::mt19937 rng(7);
  constexpr int kRows = 3, kK = 512, kLd = kK + 40;
  int differ = 0, cases = 0;
  for (int t = 0; t < 3000; ++t) {
    std::vector<float> x(static_cast<size_t>(kRows) * kLd, 1e30f);  // the stride's gap: never read
    const float spread = t % 7 == 0 ? 1e-20f : (t % 5 == 0 ? 1e20f : 3.f);
    std::normal_distribution<float> normal(0, spread);
    for (int r = 0; r < kRows; ++r) {
      float* v = x.data() + static_cast<size_t>(r) * kLd;
      for (int j = 0; j < kK; ++j) v[j] = normal(rng);
      switch ((t + r) % 10) {
        case 1: for (int j = 0; j < 256; ++j) v[j] = 0; break;
        case 2: v[10] = 5e3f * spread; v[200] = -5e3f * spread; break;
        case 3: v[10] = -5e3f * spread; v[11] = 5e3f * spread; v[300] = 5e3f * spread; break;
        case 4: for (int j = 0; j < kK; ++j) v[j] = static_cast<float>(j % 3 - 1) * 2.5f; break;
        case 5: for (int j = 0; j < kK; ++j) v[j] = std::round(v[j]) + 0.5f; break;
        case 6: v[3] = NAN; v[260] = -NAN; v[33] = NAN; break;
        case 7: for (int j = 0; j < kK; ++j) v[j] = -0.0f; break;
        case 8: for (int j = 0; j < kK; ++j) v[j] = static_cast<float>(j % 32) * (j % 2 ? -1.f : 1.f); break;
        case 9: v[5] = INFINITY; v[290] = -INFINITY; break;
        default: break;
      }
    }
    std::vector<tsn::BlockQ8> a(kRows * kK / 32), b(kRows * kK / 32);
    std::vector<tsn::BlockQ8K> c(kRows * kK / 256), d(kRows * kK / 256);
    for (int r = 0; r < kRows; ++r) {
      tsn::QuantizeRowQ8(x.data() + static_cast<size_t>(r) * kLd, kK, a.data() + r * (kK / 32));
      tsn::QuantizeRowQ8K(x.data() + static_cast<size_t>(r) * kLd, kK, c.data() + r * (kK / 256));
    }
    rows8(x.data(), kRows, kLd, kK, b.data());
    rows8k(x.data(), kRows, kLd, kK, d.data());
    ++cases;
    const bool same = std::memcmp(a.data(), b.data(), sizeof(tsn::BlockQ8) * a.size()) == 0 &&
                      std::memcmp(c.data(), d.data(), sizeof(tsn::BlockQ8K) * c.size()) == 0;
    if (!same && differ++ < 3) std::printf("%s: case %d differs from the scalar quantization\n", name, t);
  }
  std::printf("%s: %d cases, %d differ\n", name, cases, differ);
  return differ;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  int differ = Check("baseline", tsn::baseline::QuantizeRowsQ8, tsn::baseline::QuantizeRowsQ8K);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
  if (avx2) differ += Check("avx2", tsn::avx2::QuantizeRowsQ8, tsn::avx2::QuantizeRowsQ8K);
  else std::printf("avx2: skipped, not on this CPU\n");
  if (avx512) differ += Check("avx512", tsn::avx512::QuantizeRowsQ8, tsn::avx512::QuantizeRowsQ8K);
  else std::printf("avx512: skipped, not on this CPU\n");
  // The amx family's quantization is avx512_bf16's code under the amx target: it runs wherever
  // avx512_bf16 does (no tile instruction in it).
  if (bf16) {
    differ += Check("avx512_bf16", tsn::avx512_bf16::QuantizeRowsQ8, tsn::avx512_bf16::QuantizeRowsQ8K);
    differ += Check("amx", tsn::amx::QuantizeRowsQ8, tsn::amx::QuantizeRowsQ8K);
  } else {
    std::printf("avx512_bf16: skipped, not on this CPU\namx: skipped, not on this CPU\n");
  }
  return differ == 0 ? 0 : 1;
}
