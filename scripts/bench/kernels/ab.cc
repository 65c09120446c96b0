// Two builds of the native kernels in one process, alternating round by round, so a shared,
// noisy machine slows both alike (scripts/bench/kernels-ab.sh builds them and runs this).
//   ab BASE.so HEAD.so FAMILY N K TYPE COPIES
// Times KernelSet::linearPanels of an N x K weight (TYPE 0 float32, 1 bf16, 2 fp16, 3 Q8_0,
// 4 Q4_K, 5 Q6_K, 6 Q4_0, 7 Q5_0 (6 and 7 need a base build that has them): random blocks with
// small scales; COPIES distinct copies cycled so the
// weights stream from memory as in a model) at 1 to 500 rows, one thread, and prints GFLOP/s
// of each build and head / base. Both builds must pack weights alike (PackedLinear is this
// program's own, the head's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "kernels/Kernels.h"
#include "kernels/QuantKernels.h"
#include "sides.h"

using namespace tsn;

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: ab BASE.so HEAD.so FAMILY N K TYPE COPIES\n");
    return 2;
  }
  const std::string family = argv[3];
  const int n = std::atoi(argv[4]), k = std::atoi(argv[5]), type = std::atoi(argv[6]), copies = std::atoi(argv[7]);
  const KernelSet* sets[2];
  if (!LoadSides(argv[1], argv[2], family, sets)) return 1;
  std::vector<float> weight(static_cast<size_t>(n) * k), bias(n);
  for (auto& v : weight) v = static_cast<float>(std::rand() % 1000) / 1000.0f - 0.5f;
  std::vector<PackedLinear> matrices, headMatrices;
  const auto wtype = static_cast<WeightType>(type);
  // AB_INTERLEAVE=1 (Q4_K, Q4_0, Q5_0, Q8_0): the head multiplies by the avx2 family's interleaved layout (Q8_0
  // on amx: its tile panels), the
  // base by the GGUF rows (the same values); AB_INTERLEAVE=2: both by the interleaved layout
  // (two builds that both read it).
  const char* interleaveMode = std::getenv("AB_INTERLEAVE");
  const bool interleave = interleaveMode != nullptr && (*interleaveMode == '1' || *interleaveMode == '2') &&
                          (wtype == WeightType::Q4_K || wtype == WeightType::Q4_0 || wtype == WeightType::Q5_0 ||
                           wtype == WeightType::Q8_0);
  const bool bothInterleaved = interleave && *interleaveMode == '2';
  if (type >= 3) {
    // GGUF rows of random bytes whose float16 scales are small (0x1c00: 2^-8), so sums stay finite.
    const int block = BlockValues(wtype), bytes = BlockBytes(wtype);
    const size_t rowBytes = static_cast<size_t>(k / block) * bytes;
    for (int i = 0; i < copies; ++i) {
      auto data = std::make_shared<std::vector<uint8_t>>(rowBytes * n);
      for (auto& v : *data) v = static_cast<uint8_t>(std::rand());
      std::vector<const uint8_t*> rows(n);
      for (int c = 0; c < n; ++c) {
        uint8_t* row = data->data() + rowBytes * c;
        rows[c] = row;
        for (int b = 0; b < k / block; ++b) {
          uint8_t* at = row + static_cast<size_t>(b) * bytes;
          const int scaleAt = wtype == WeightType::Q6_K ? 208 : 0;
          at[scaleAt] = 0x00, at[scaleAt + 1] = 0x1c;
          if (wtype == WeightType::Q4_K) at[2] = 0x00, at[3] = 0x1c;
        }
      }
      matrices.emplace_back(rows, std::vector<WeightType>(n, wtype), data, bias.data(), n, k);
      if (interleave) {
        // The head's copy of the same bytes, its Q4_K rows interleaved (PackedLinear::InterleaveQ4K).
        auto copy = std::make_shared<std::vector<uint8_t>>(*data);
        for (int c = 0; c < n; ++c) rows[c] = copy->data() + rowBytes * c;
        headMatrices.emplace_back(rows, std::vector<WeightType>(n, wtype), copy, bias.data(), n, k);
        if (wtype == WeightType::Q4_K) {
          headMatrices.back().InterleaveQ4K();
        } else if (wtype == WeightType::Q8_0 && (family == "amx" || family == "avx512_bf16")) {
          headMatrices.back().TileQ8_0();  // the amx family's layout (DecoderStepper::OwnWeights)
        } else if (wtype == WeightType::Q8_0) {
          headMatrices.back().InterleaveQ8_0();
        } else {
          headMatrices.back().InterleaveBlock32();
        }
      }
    }
  } else {
    for (int i = 0; i < copies; ++i) matrices.emplace_back(weight.data(), bias.data(), n, k, wtype);
  }
  // AB_IN_PLACE=1 (bf16): the head multiplies by the weight's rows where they lie (the bf16
  // rows in place a checkpoint's load uses), the base by the packed panels (the same values).
  const char* inPlaceMode = std::getenv("AB_IN_PLACE");
  const bool inPlace = inPlaceMode != nullptr && *inPlaceMode == '1' && wtype == WeightType::BF16;
  if (inPlace) {
    for (int i = 0; i < copies; ++i) {
      auto data = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(n) * k);
      for (size_t at = 0; at < data->size(); ++at) (*data)[at] = FloatToBf16(weight[at]);
      std::vector<const uint8_t*> rows(n);
      for (int c = 0; c < n; ++c) rows[c] = reinterpret_cast<const uint8_t*>(data->data() + static_cast<size_t>(c) * k);
      headMatrices.emplace_back(rows, std::vector<WeightType>(n, WeightType::BF16), data, bias.data(), n, k);
    }
  }
  const bool other = interleave || inPlace;  // the head has matrices of its own
  std::vector<float> x(static_cast<size_t>(500) * k), y(static_cast<size_t>(500) * n);
  for (auto& v : x) v = static_cast<float>(std::rand() % 1000) / 1000.0f - 0.5f;
  // AB_ROWS="1,4": only those row counts (default: all ten).
  std::vector<int> rowCounts = {1, 2, 3, 4, 6, 8, 16, 32, 64, 500};
  if (const char* only = std::getenv("AB_ROWS"); only && *only) {
    rowCounts.clear();
    for (const char* at = only; *at;) {
      char* end;
      const long value = std::strtol(at, &end, 10);
      if (end == at || value < 1 || value > 500) {
        std::fprintf(stderr, "AB_ROWS: row counts of 1 to 500, comma-separated\n");
        return 2;
      }
      rowCounts.push_back(static_cast<int>(value));
      at = *end == ',' ? end + 1 : end;
    }
  }
  std::printf("%s, %d x %d, type %d, %d copies: GFLOP/s base / head (head / base), best of 5 alternating rounds each\n",
              sets[1]->name, n, k, type, copies);
  for (int rows : rowCounts) {
    const double flops = 2.0 * rows * n * k;
    const int reps = std::clamp(static_cast<int>(3e8 / flops), 3, 500);
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 10; ++round) {
      const KernelSet& set = *sets[round % 2];
      const double start = Now();
      const std::vector<PackedLinear>& side = other && (round % 2 == 1 || bothInterleaved) ? headMatrices : matrices;
      for (int r = 0; r < reps; ++r) {
        const PackedLinear& m = side[r % copies];
        set.linearPanels(x.data(), rows, k, m, y.data(), n, 0, m.panels(), Epilogue::Store);
      }
      best[round % 2] = std::min(best[round % 2], (Now() - start) / reps);
    }
    std::printf("rows %3d: %6.1f / %6.1f (%.2fx)\n", rows, flops / best[0] / 1e9, flops / best[1] / 1e9, best[0] / best[1]);
  }
  // The head's products against the base's: a change meant to keep the arithmetic says so here
  // (0, bit for bit), one that reorders it shows by how much.
  {
    double worst = 0;
    const std::vector<PackedLinear>& headSide = other ? headMatrices : matrices;
    std::vector<float> baseY(static_cast<size_t>(19) * n);
    for (int count : {1, 4, 19}) {
      sets[0]->linearPanels(x.data(), count, k, matrices[0], baseY.data(), n, 0, matrices[0].panels(), Epilogue::Store);
      sets[1]->linearPanels(x.data(), count, k, headSide[0], y.data(), n, 0, headSide[0].panels(), Epilogue::Store);
      for (size_t i = 0; i < static_cast<size_t>(count) * n; ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(baseY[i] - y[i]) / (1 + std::fabs(baseY[i]))));
      }
    }
    std::printf("head against base (1, 4 and 19 rows): largest relative difference %.2g%s\n", worst,
                worst == 0 ? " (bit for bit)" : "");
  }
  // The head's promise that a row's result does not depend on its batch: every row of a batch
  // against the same row alone, bit for bit.
  const PackedLinear& m = other ? headMatrices[0] : matrices[0];
  std::vector<float> alone(n);
  if (interleave) {
    // The interleaved products against the GGUF rows': the same values up to float rounding.
    double worst = 0;
    for (int rows : {1, 5}) {
      std::vector<float> rowsY(static_cast<size_t>(rows) * n);
      sets[1]->linearPanels(x.data(), rows, k, matrices[0], rowsY.data(), n, 0, m.panels(), Epilogue::Store);
      sets[1]->linearPanels(x.data(), rows, k, m, y.data(), n, 0, m.panels(), Epilogue::Store);
      for (size_t i = 0; i < rowsY.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(rowsY[i] - y[i]) / (1 + std::fabs(rowsY[i]))));
      }
    }
    std::printf("head: interleaved against GGUF rows, largest relative difference %.2g\n", worst);
    if (worst > 1e-4) return 1;
  }
  if ((wtype == WeightType::Q4_0 || wtype == WeightType::Q5_0) && !interleave) {
    // A Q4_0 or Q5_0 block is multiplied as the Q8_0 block of its values and scale: the head's
    // products of both must be the same bits.
    const int blocks = k / 32, bytes = BlockBytes(wtype);
    auto q8 = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n) * blocks * 34);
    std::vector<const uint8_t*> rows(n);
    for (int c = 0; c < n; ++c) {
      rows[c] = q8->data() + static_cast<size_t>(c) * blocks * 34;
      for (int b = 0; b < blocks; ++b) {
        const uint8_t* from = m.quantRow(c) + static_cast<size_t>(b) * bytes;
        uint8_t* to = q8->data() + (static_cast<size_t>(c) * blocks + b) * 34;
        to[0] = from[0], to[1] = from[1];
        Block32Values(wtype, from, reinterpret_cast<int8_t*>(to + 2));
      }
    }
    const PackedLinear asQ8(rows, std::vector<WeightType>(n, WeightType::Q8_0), q8, bias.data(), n, k);
    bool same = true;
    std::vector<float> q8y(static_cast<size_t>(19) * n);
    for (int count : {1, 2, 3, 5, 19}) {
      sets[1]->linearPanels(x.data(), count, k, m, y.data(), n, 0, m.panels(), Epilogue::Store);
      sets[1]->linearPanels(x.data(), count, k, asQ8, q8y.data(), n, 0, m.panels(), Epilogue::Store);
      same = same && std::equal(q8y.begin(), q8y.begin() + static_cast<size_t>(count) * n, y.begin());
    }
    std::printf("head: equal to the same values as Q8_0 blocks, bit for bit: %s\n", same ? "yes" : "NO");
    if (!same) return 1;
  }
  int differ = 0;
  for (int rows : {2, 3, 5, 8, 9, 16, 19, 40}) {
    sets[1]->linearPanels(x.data(), rows, k, m, y.data(), n, 0, m.panels(), Epilogue::Store);
    for (int r = 0; r < rows; ++r) {
      sets[1]->linearPanels(x.data() + static_cast<size_t>(r) * k, 1, k, m, alone.data(), n, 0, m.panels(), Epilogue::Store);
      if (!std::equal(alone.begin(), alone.end(), y.begin() + static_cast<size_t>(r) * n)) {
        std::printf("head: row %d of %d differs from the row alone\n", r, rows);
        ++differ;
      }
    }
  }
  std::printf("head: each row of 2-40 equals the row alone, bit for bit: %s\n", differ == 0 ? "yes" : "NO");
  return differ == 0 ? 0 : 1;
}
