// Every kernel family's K-quant products (QuantLinearPanels in kernels/QuantKernelsBody.inc) for
// rows of Q5_K, alone and mixed with Q4_K and Q6_K rows in one matrix as llama.cpp's Q5_K_M and
// Q4_K_M files mix them, against ggml's arithmetic written out here: the activations quantized by
// the scalar QuantizeRowQ8K, each super-block's exact integer sums (ggml_vec_dot_q5_K_q8_K,
// _q4_K_q8_K, _q6_K_q8_K), scaled and summed in double. A product must equal that within float32
// rounding of the sums (relative 1e-5 of the sum of the terms' magnitudes: a wrong bit, scale or
// min moves it by far more), and every row of a batch must equal the same row alone, bit for bit.
// Batches of 1 to 20 rows cover the one-row pass, every tile width and a tile split at 16.
// Built and run by kquantProducts.test.ts; prints one line per family, exits 1 on a difference.
// Families the CPU cannot run are reported as skipped.
#include "kernels/QuantKernels.cc"

#include <cmath>
#include <cstdio>
#include <random>

namespace {

using Panels = void (*)(const float*, int, int, const tsn::PackedLinear&, float*, int, int, int, tsn::Epilogue);
using tsn::WeightType;

void RandomRow(WeightType type, int k, std::mt19937& rng, uint8_t* out) {
  std::uniform_int_distribution<int> byte(0, 255);
  const int bytes = tsn::BlockBytes(type);
  for (int b = 0; b < k / 256; ++b) {
    uint8_t* block = out + b * bytes;
    for (int i = 0; i < bytes; ++i) block[i] = static_cast<uint8_t>(byte(rng));
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    const uint16_t d = tsn::FloatToHalf(scale(rng)), dmin = tsn::FloatToHalf(scale(rng));
    if (type == WeightType::Q6_K) {
      std::memcpy(block + 208, &d, 2);
    } else {
      std::memcpy(block, &d, 2);
      std::memcpy(block + 2, &dmin, 2);
    }
  }
}

// ggml's integer sums of one weight row against one row of Q8_K activations, scaled in double;
// `magnitude`: the sum of the terms' magnitudes, what float32 rounding is relative to.
double Reference(WeightType type, const uint8_t* row, const tsn::BlockQ8K* x, int k, double* magnitude) {
  const auto half = [](const uint8_t* p) { return static_cast<double>(tsn::HalfToFloat(static_cast<uint16_t>(p[0] | p[1] << 8))); };
  double total = 0;
  *magnitude = 0;
  const int bytes = tsn::BlockBytes(type);
  for (int b = 0; b < k / 256; ++b) {
    const tsn::BlockQ8K& xb = x[b];
    const uint8_t* block = row + b * bytes;
    int64_t sum = 0, sumAbs = 0, mins = 0, minsAbs = 0;
    double d, dmin = 0;
    if (type == WeightType::Q6_K) {
      // value 128h + 32i + l: nibble i / 2 of ql[64h + 32(i % 2) + l] (low for i < 2), bits 2i of
      // qh[32h + l] as its top two, less 32; scale sc[8h + 2i + l / 16].
      d = half(block + 208);
      for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < 4; ++i) {
          for (int l = 0; l < 32; ++l) {
            const uint8_t low = block[64 * h + 32 * (i % 2) + l];
            const int q = ((i < 2 ? low & 0xF : low >> 4) | ((block[128 + 32 * h + l] >> (2 * i)) & 3) << 4) - 32;
            const int term = static_cast<int8_t>(block[192 + 8 * h + 2 * i + l / 16]) * q * xb.q[128 * h + 32 * i + l];
            sum += term;
            sumAbs += std::abs(term);
          }
        }
      }
    } else {
      d = half(block);
      dmin = half(block + 2);
      uint8_t scalesMins[16];
      tsn::UnpackQ4KScales(block + 4, scalesMins);
      const bool five = type == WeightType::Q5_K;
      const uint8_t* qh = block + 16;
      const uint8_t* qs = block + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t packed = qs[32 * (j / 2) + l];
          int q = j % 2 == 0 ? packed & 0xF : packed >> 4;
          if (five) q += ((qh[l] >> j) & 1) << 4;
          const int term = scalesMins[j] * q * xb.q[32 * j + l], minTerm = scalesMins[8 + j] * xb.q[32 * j + l];
          sum += term;
          sumAbs += std::abs(term);
          mins += minTerm;
          minsAbs += std::abs(minTerm);
        }
      }
    }
    const double xd = xb.d;
    total += xd * (d * static_cast<double>(sum) - dmin * static_cast<double>(mins));
    *magnitude += std::fabs(xd) * (std::fabs(d) * static_cast<double>(sumAbs) + std::fabs(dmin) * static_cast<double>(minsAbs));
  }
  return total;
}

int Check(const char* name, Panels panels) {
  std::mt19937 rng(11);
  int differ = 0, cases = 0;
  struct Shape {
    int n, k;
    std::vector<WeightType> mix;  // column c's type: mix[c % size]
  };
  const std::vector<Shape> shapes = {
      {40, 512, {WeightType::Q5_K}},
      {48, 1024, {WeightType::Q5_K, WeightType::Q6_K, WeightType::Q5_K}},
      {33, 256, {WeightType::Q4_K, WeightType::Q5_K}},
      {24, 4608, {WeightType::Q5_K}},  // k > 4096: tiles of eight rows
  };
  for (const Shape& shape : shapes) {
    std::vector<std::vector<uint8_t>> storage(shape.n);
    std::vector<const uint8_t*> rows(shape.n);
    std::vector<WeightType> types(shape.n);
    for (int c = 0; c < shape.n; ++c) {
      types[c] = shape.mix[c % shape.mix.size()];
      storage[c].resize(tsn::RowBytes(types[c], shape.k));
      RandomRow(types[c], shape.k, rng, storage[c].data());
      rows[c] = storage[c].data();
    }
    std::vector<float> bias(shape.n);
    std::normal_distribution<float> normal(0, 1);
    for (float& b : bias) b = normal(rng);
    const tsn::PackedLinear w(rows, types, nullptr, bias.data(), shape.n, shape.k);
    constexpr int kMaxRows = 20;
    std::vector<float> x(static_cast<size_t>(kMaxRows) * shape.k);
    for (float& v : x) v = normal(rng);
    std::vector<tsn::BlockQ8K> q8k(static_cast<size_t>(kMaxRows) * (shape.k / 256));
    for (int r = 0; r < kMaxRows; ++r) tsn::QuantizeRowQ8K(x.data() + static_cast<size_t>(r) * shape.k, shape.k, q8k.data() + r * (shape.k / 256));
    std::vector<float> alone(static_cast<size_t>(kMaxRows) * shape.n);
    for (int r = 0; r < kMaxRows; ++r) {
      panels(x.data() + static_cast<size_t>(r) * shape.k, 1, shape.k, w, alone.data() + static_cast<size_t>(r) * shape.n, shape.n, 0,
             w.panels(), tsn::Epilogue::Store);
      for (int c = 0; c < shape.n; ++c) {
        double magnitude = 0;
        const double expected = bias[c] + Reference(types[c], rows[c], q8k.data() + r * (shape.k / 256), shape.k, &magnitude);
        const double got = alone[static_cast<size_t>(r) * shape.n + c];
        ++cases;
        if (!(std::fabs(got - expected) <= 1e-5 * (magnitude + std::fabs(bias[c]))) && differ++ < 5) {
          std::printf("%s: n %d k %d row %d column %d: %.9g, ggml's sums give %.9g\n", name, shape.n, shape.k, r, c, got, expected);
        }
      }
    }
    for (int batch = 2; batch <= kMaxRows; ++batch) {
      std::vector<float> y(static_cast<size_t>(batch) * shape.n);
      panels(x.data(), batch, shape.k, w, y.data(), shape.n, 0, w.panels(), tsn::Epilogue::Store);
      ++cases;
      if (std::memcmp(y.data(), alone.data(), sizeof(float) * y.size()) != 0 && differ++ < 5) {
        std::printf("%s: n %d k %d: a batch of %d rows differs from the rows alone\n", name, shape.n, shape.k, batch);
      }
    }
  }
  std::printf("%s: %d cases, %d differ\n", name, cases, differ);
  return differ;
}

}  // namespace

int main() {
  __builtin_cpu_init();
  int differ = Check("baseline", tsn::baseline::QuantLinearPanels);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
  if (avx2) differ += Check("avx2", tsn::avx2::QuantLinearPanels);
  else std::printf("avx2: skipped, not on this CPU\n");
  if (avx512) differ += Check("avx512", tsn::avx512::QuantLinearPanels);
  else std::printf("avx512: skipped, not on this CPU\n");
  // The amx family's K-quant products are avx512_bf16's code under the amx target (no tile
  // instruction in them): they run wherever avx512_bf16 does.
  if (bf16) {
    differ += Check("avx512_bf16", tsn::avx512_bf16::QuantLinearPanels);
    differ += Check("amx", tsn::amx::QuantLinearPanels);
  } else {
    std::printf("avx512_bf16: skipped, not on this CPU\namx: skipped, not on this CPU\n");
  }
  return differ == 0 ? 0 : 1;
}
