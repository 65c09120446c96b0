#include "Sampler.h"

#include <algorithm>
#include <limits>

#include "Errors.h"

namespace tsn {

RowRandom::RowRandom(int64_t seed)
    : engine_(seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}()) {}

double RowRandom::UniformOpenClosed() {
  // 53 random bits in [0, 1), mirrored into (0, 1].
  return 1.0 - static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
}

std::vector<int64_t> SampleTokens(const at::Tensor& logitsIn,
                                  const std::vector<SamplingParams>& params,
                                  std::vector<RowRandom*>& randoms) {
  const int64_t rows = logitsIn.size(0);
  const int64_t vocab = logitsIn.size(1);
  at::Tensor logits = logitsIn.to(at::kFloat);
  if (at::isnan(logits).any().item<bool>()) {
    throw CodedError("ERR_INFERENCE", "the model produced NaN logits");
  }

  std::vector<int64_t> out(rows, 0);
  std::vector<int64_t> sampled;  // rows that sample rather than take the argmax
  for (int64_t r = 0; r < rows; ++r) {
    if (params[r].temperature > kGreedyTemperature) sampled.push_back(r);
  }

  if (static_cast<int64_t>(sampled.size()) < rows) {
    at::Tensor greedy = logits.argmax(1).to(at::kCPU);
    const int64_t* data = greedy.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) out[r] = data[r];
  }
  if (sampled.empty()) return out;

  const int64_t n = static_cast<int64_t>(sampled.size());
  std::vector<float> inverseTemperature(n);
  std::vector<int64_t> keep(n);
  std::vector<double> draws(n);
  int64_t topKWidth = 0;  // widest top-k among the rows that restrict the vocabulary
  for (int64_t i = 0; i < n; ++i) {
    const auto& p = params[sampled[i]];
    inverseTemperature[i] = static_cast<float>(1.0 / p.temperature);
    keep[i] = (p.topK <= 0 || p.topK >= vocab) ? vocab : p.topK;
    if (keep[i] < vocab) topKWidth = std::max(topKWidth, keep[i]);
    draws[i] = randoms[sampled[i]]->UniformOpenClosed();
  }
  const auto device = logits.device();
  at::Tensor index = at::tensor(sampled, at::kLong).to(device);
  at::Tensor scaled = logits.index_select(0, index) *
                      at::tensor(inverseTemperature, at::kFloat).to(device).unsqueeze(1);
  if (topKWidth > 0) {
    // Each row keeps the tokens at or above its own k-th largest value; rows without a
    // top-k keep everything.
    std::vector<int64_t> column(n);
    std::vector<uint8_t> keepsAll(n);
    for (int64_t i = 0; i < n; ++i) {
      keepsAll[i] = keep[i] >= vocab;
      column[i] = keepsAll[i] ? 0 : keep[i] - 1;
    }
    at::Tensor topValues = std::get<0>(scaled.topk(topKWidth, 1, true, true));
    at::Tensor kth = topValues.gather(1, at::tensor(column, at::kLong).to(device).unsqueeze(1));
    at::Tensor unrestricted = at::tensor(keepsAll, at::kByte).to(at::kBool).to(device).unsqueeze(1);
    kth = kth.masked_fill(unrestricted, -std::numeric_limits<float>::infinity());
    scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
  }
  // Inverse-CDF draw: the first token whose cumulative probability reaches u * total.
  at::Tensor cdf = at::softmax(scaled, 1).cumsum(1);
  at::Tensor total = cdf.select(1, vocab - 1).unsqueeze(1);
  at::Tensor u = at::tensor(draws, at::kDouble).to(device).to(at::kFloat).unsqueeze(1) * total;
  at::Tensor chosen = at::searchsorted(cdf, u).clamp_max(vocab - 1).to(at::kCPU);
  const int64_t* data = chosen.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) out[sampled[i]] = data[i];
  return out;
}

}  // namespace tsn
