// Every kernel family's products by bf16 weights read where they lie (PackedLinear's bf16 rows
// in place, RowsInPlace in kernels/KernelsBody.inc), held to:
//   - a double-precision sum of the same bf16 weights times the activations the family
//     multiplies (rounded to bf16 on the families with vdpbf16ps), within 2e-5 of the sum of
//     the products' magnitudes; the same family's packed panels of the same values are held to
//     the same bound, so the two layouts agree;
//   - each row of a batch equal, bit for bit, to the row multiplied alone, and a call over part
//     of the panels equal to the whole call's columns there (a row's outputs must not depend on
//     the rows beside it, nor on how the team splits the columns);
//   - every epilogue (the bias added, the output accumulated into, both GELUs) as the packed
//     panels apply it.
// Shapes: k from 2 to 2100 (values past the last whole chunk of pairs, more than one block of
// k), n not a multiple of 16, 1 to 13 rows and 40. Built and run by bf16Rows.test.ts; prints one
// line per family, exits 1 on a difference. Families the CPU cannot run are reported as skipped.
#include "kernels/QuantKernels.cc"

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#define TSN_DECLARE(ns)                                                                                          \
  namespace tsn::ns {                                                                                            \
  void LinearPanels(const float* x, int rows, int ldx, const PackedLinear& w, float* y, int ldy, int p0, int p1, \
                    Epilogue epilogue);                                                                          \
  }
TSN_DECLARE(baseline)
TSN_DECLARE(avx2)
TSN_DECLARE(avx512)
TSN_DECLARE(avx512_bf16)
TSN_DECLARE(amx)
#undef TSN_DECLARE

namespace {

using tsn::Epilogue;
using tsn::PackedLinear;
using tsn::WeightType;
using Panels = void (*)(const float*, int, int, const PackedLinear&, float*, int, int, int, Epilogue);

float Bf16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

double Finish(double value, double before, Epilogue epilogue) {
  switch (epilogue) {
    case Epilogue::Store: return value;
    case Epilogue::Accumulate: return value + before;
    case Epilogue::GeluTanh: return 0.5 * value * (1 + std::tanh(0.7978845608028654 * (value + 0.044715 * value * value * value)));
    case Epilogue::GeluErf: return 0.5 * value * (1 + std::erf(value / std::sqrt(2.0)));
  }
  return value;
}

int Check(const char* name, Panels linear, bool roundsActivations) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  int differ = 0, cases = 0;
  const auto report = [&](const char* what, int n, int k, int rows) {
    if (differ++ < 5) std::printf("%s: %s (n %d, k %d, rows %d)\n", name, what, n, k, rows);
  };
  const int shapes[][2] = {{16, 2}, {5, 30}, {33, 32}, {17, 64}, {40, 96}, {16, 98}, {24, 256}, {19, 1026}, {48, 2048}, {9, 2100}};
  for (const auto& shape : shapes) {
    const int n = shape[0], k = shape[1];
    for (int withBias = 0; withBias < 2; ++withBias) {
      auto bits = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n) * k);
      for (auto& b : *bits) b = tsn::FloatToBf16(normal(rng) * 0.1f);
      std::vector<float> wide(bits->size()), bias(n);
      for (size_t i = 0; i < bits->size(); ++i) wide[i] = Bf16((*bits)[i]);
      for (auto& b : bias) b = normal(rng);
      std::vector<const uint8_t*> rowPointers(n);
      for (int c = 0; c < n; ++c) rowPointers[c] = reinterpret_cast<const uint8_t*>(bits->data() + static_cast<size_t>(c) * k);
      const float* b = withBias ? bias.data() : nullptr;
      const PackedLinear inPlace(rowPointers, std::vector<WeightType>(n, WeightType::BF16), bits, b, n, k);
      const PackedLinear packed(wide.data(), b, n, k, WeightType::BF16);
      if (!inPlace.inPlace() || inPlace.quantized() || inPlace.bytes() != static_cast<size_t>(n) * k * 2) {
        report("the rows in place are not told apart from packed or quantized ones", n, k, 0);
      }
      // Row() of a table read in place (a tied embedding) gives the row's values.
      std::vector<float> row(k);
      inPlace.Row(n - 1, row.data());
      if (!std::equal(row.begin(), row.end(), wide.begin() + static_cast<size_t>(n - 1) * k)) report("Row() differs", n, k, 0);
      for (int rows : {1, 2, 3, 4, 5, 6, 7, 8, 13, 40}) {
        const int ldx = k + 3, ldy = n + 5;
        std::vector<float> x(static_cast<size_t>(rows) * ldx);
        for (auto& v : x) v = normal(rng);
        for (Epilogue epilogue : {Epilogue::Store, Epilogue::Accumulate, Epilogue::GeluTanh, Epilogue::GeluErf}) {
          ++cases;
          std::vector<float> start(static_cast<size_t>(rows) * ldy);
          for (auto& v : start) v = normal(rng);
          std::vector<float> a = start, p = start;
          linear(x.data(), rows, ldx, inPlace, a.data(), ldy, 0, inPlace.panels(), epilogue);
          linear(x.data(), rows, ldx, packed, p.data(), ldy, 0, packed.panels(), epilogue);
          bool wrong = false, apart = false, spilled = false;
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < ldy; ++c) {
              const size_t at = static_cast<size_t>(r) * ldy + c;
              if (c >= n) {  // past the n outputs: never written
                spilled = spilled || a[at] != start[at];
                continue;
              }
              double sum = withBias ? bias[c] : 0, magnitude = std::fabs(sum);
              for (int kk = 0; kk < k; ++kk) {
                const float xv = x[static_cast<size_t>(r) * ldx + kk];
                const double product = static_cast<double>(roundsActivations ? Bf16(tsn::FloatToBf16(xv)) : xv) *
                                       wide[static_cast<size_t>(c) * k + kk];
                sum += product;
                magnitude += std::fabs(product);
              }
              const double expected = Finish(sum, start[at], epilogue);
              const double bound = 2e-5 * (magnitude + std::fabs(start[at])) + 1e-6;
              wrong = wrong || !(std::fabs(a[at] - expected) <= bound);
              apart = apart || !(std::fabs(p[at] - expected) <= bound);
            }
          }
          if (wrong) report("rows in place differ from the double-precision products", n, k, rows);
          if (apart) report("packed panels differ from the double-precision products", n, k, rows);
          if (spilled) report("wrote past the n outputs", n, k, rows);
          if (epilogue != Epilogue::Store) continue;
          // Each row alone, and the columns a panel at a time: the same bits.
          for (int r = 0; r < rows; ++r) {
            std::vector<float> alone(ldy, 0.f);
            linear(x.data() + static_cast<size_t>(r) * ldx, 1, ldx, inPlace, alone.data(), ldy, 0, inPlace.panels(), epilogue);
            if (!std::equal(alone.begin(), alone.begin() + n, a.begin() + static_cast<size_t>(r) * ldy)) {
              report("a row of a batch differs from the row alone", n, k, rows);
              break;
            }
          }
          std::vector<float> split(static_cast<size_t>(rows) * ldy, 0.f);
          for (int q = 0; q < inPlace.panels(); ++q) linear(x.data(), rows, ldx, inPlace, split.data(), ldy, q, q + 1, epilogue);
          for (int r = 0; r < rows; ++r) {
            if (!std::equal(split.begin() + static_cast<size_t>(r) * ldy, split.begin() + static_cast<size_t>(r) * ldy + n,
                            a.begin() + static_cast<size_t>(r) * ldy)) {
              report("a call over one panel differs from the whole call's columns", n, k, rows);
              break;
            }
          }
        }
      }
    }
  }
  std::printf("%s: %d cases, %d differ\n", name, cases, differ);
  return differ;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  int differ = Check("baseline", tsn::baseline::LinearPanels, false);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
  if (avx2) differ += Check("avx2", tsn::avx2::LinearPanels, false);
  else std::printf("avx2: skipped, not on this CPU\n");
  if (avx512) differ += Check("avx512", tsn::avx512::LinearPanels, false);
  else std::printf("avx512: skipped, not on this CPU\n");
  // The amx family's bf16 products are avx512_bf16's code compiled again (no tile instruction
  // in them): they run wherever avx512_bf16 does.
  if (bf16) {
    differ += Check("avx512_bf16", tsn::avx512_bf16::LinearPanels, true);
    differ += Check("amx", tsn::amx::LinearPanels, true);
  } else {
    std::printf("avx512_bf16: skipped, not on this CPU\namx: skipped, not on this CPU\n");
  }
  return differ == 0 ? 0 : 1;
}
