// Next-token choice for the rows of one decode step: greedy, or temperature plus top-k
// sampling with a random stream per row (a seeded row is reproducible whatever batch it
// shares). Numerically safe: temperatures at or below kGreedyTemperature are greedy, top_k
// beyond the vocabulary means the whole vocabulary, and NaN logits are an error, not a
// token.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <random>
#include <vector>

namespace tsn {

constexpr double kGreedyTemperature = 1e-5;

struct SamplingParams {
  double temperature = 1.0;
  int64_t topK = 0;  // 0: whole vocabulary
};

class RowRandom {
 public:
  explicit RowRandom(int64_t seed);  // seed < 0 draws one
  double UniformOpenClosed();        // in (0, 1]

 private:
  std::mt19937_64 engine_;
};

// logits: [n, V] on any device. Returns one token id per row.
std::vector<int64_t> SampleTokens(const at::Tensor& logits,
                                  const std::vector<SamplingParams>& params,
                                  std::vector<RowRandom*>& randoms);

// The path for logits on an accelerator (SampleTokens picks it): tensor ops only, one
// device-to-host copy per call (the ids). Also runs on CPU tensors, so it can be checked
// against the CPU path there.
std::vector<int64_t> SampleWithTensorOps(const at::Tensor& logits,
                                         const std::vector<SamplingParams>& params,
                                         std::vector<RowRandom*>& randoms);

}  // namespace tsn
