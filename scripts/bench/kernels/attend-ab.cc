// Attention of two builds of the native kernels in one process, alternating round by round
// (scripts/bench/kernels-ab.sh builds them and runs this when ATTEND_SHAPES is set).
//   attend-ab BASE.so HEAD.so FAMILY POSITIONS GROUP QUERIES
// Times KernelSet::attendHeads: GROUP query heads over one kv head of dimension 64, QUERIES
// new tokens (1: a decode step; more: a prefill chunk) whose last sees POSITIONS keys, a bf16
// cache. Enough distinct caches are cycled (at least 64 MB) that they come from memory, as in a
// model's step, whose weights evict them. Prints microseconds per call of each build, head /
// base, a decode step's cache bytes read per second, and whether both builds give the same bits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "kernels/Kernels.h"
#include "sides.h"

using namespace tsn;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: attend-ab BASE.so HEAD.so FAMILY POSITIONS GROUP QUERIES\n");
    return 2;
  }
  const std::string family = argv[3];
  const int positions = std::atoi(argv[4]), group = std::atoi(argv[5]), queries = std::atoi(argv[6]);
  if (positions < 1 || group < 1 || queries < 1 || queries > positions || group * std::min(queries, 4) > 64) {
    std::fprintf(stderr, "attend-ab: 1 <= QUERIES <= POSITIONS, GROUP >= 1\n");
    return 2;
  }
  const KernelSet* sets[2];
  if (!LoadSides(argv[1], argv[2], family, sets)) return 1;
  constexpr int hd = 64;
  const int pad = (positions + 15) / 16 * 16;
  const size_t each = static_cast<size_t>(pad) * hd;  // elements of keys, and of values, per cache
  const int caches = std::max<int>(4, static_cast<int>((size_t{64} << 20) / (4 * each)));
  std::vector<uint16_t> keys(each * caches), values(each * caches);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = FloatToBf16(static_cast<float>(std::rand() % 1000) / 1000.0f - 0.5f);
    values[i] = FloatToBf16(static_cast<float>(std::rand() % 1000) / 1000.0f - 0.5f);
  }
  const int width = group * hd;
  std::vector<float> q(static_cast<size_t>(queries) * width), scratch(static_cast<size_t>(kAttendScratchRows) * (pad + 16));
  std::vector<float> out[2] = {std::vector<float>(q.size()), std::vector<float>(q.size())};
  for (auto& v : q) v = static_cast<float>(std::rand() % 1000) / 1000.0f - 0.5f;
  const auto call = [&](int side, int c) {
    sets[side]->attendHeads(q.data(), width, group, queries, positions - queries, keys.data() + each * c,
                            values.data() + each * c, WeightType::BF16, hd, 0.125f, out[side].data(), width, scratch.data());
  };
  const int reps = std::max(caches, std::min(20 * caches, static_cast<int>(2e8 / (4.0 * each * queries))));
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 10; ++round) {
    const int side = round % 2;
    const double start = Now();
    for (int r = 0; r < reps; ++r) call(side, r % caches);
    best[side] = std::min(best[side], (Now() - start) / reps);
  }
  call(0, 0);
  call(1, 0);
  const bool same = std::memcmp(out[0].data(), out[1].data(), sizeof(float) * out[0].size()) == 0;
  std::printf("%s, %d positions, group %d, %d queries: us per call base / head %.2f / %.2f (%.2fx)", sets[1]->name, positions,
              group, queries, best[0] * 1e6, best[1] * 1e6, best[0] / best[1]);
  if (queries == 1) {
    const double bytes = 4.0 * positions * hd;  // the keys and values a decode step reads, bf16
    std::printf(", cache read GB/s %.1f / %.1f", bytes / best[0] / 1e9, bytes / best[1] / 1e9);
  }
  std::printf("; same bits: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
