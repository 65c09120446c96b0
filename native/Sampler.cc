#include "Sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "DeviceMemory.h"
#include "ErrorCodes.h"
#include "Errors.h"

namespace tsn {

RowRandom::RowRandom(int64_t seed)
    : engine_(seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}()) {}

double RowRandom::UniformOpenClosed() {
  // 53 random bits in [0, 1), mirrored into (0, 1].
  return 1.0 - static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// The CPU path: plain loops over each row, no tensor ops (a decode step of a small model
// takes a fraction of a millisecond; dispatching a dozen ATen ops would cost a tenth of it).
std::vector<int64_t> SampleOnCpu(const at::Tensor& logitsIn, const std::vector<SamplingParams>& params,
                                 std::vector<RowRandom*>& randoms) {
  const at::Tensor logits = logitsIn.to(at::kFloat).contiguous();
  const int64_t rows = logits.size(0);
  const int64_t vocab = logits.size(1);
  std::vector<int64_t> out(rows, 0);
  std::vector<float> weights(vocab);
  std::vector<float> sorted;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data_ptr<float>() + r * vocab;
    int64_t best = 0;
    float peak = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < vocab; ++v) {
      if (std::isnan(row[v])) throw CodedError(ErrorCode::kInference, "the model produced NaN logits");
      if (row[v] > peak) {
        peak = row[v];
        best = v;
      }
    }
    if (!std::isfinite(peak)) throw CodedError(ErrorCode::kInference, "the model produced no finite logit");
    const SamplingParams& p = params[r];
    if (p.temperature <= kGreedyTemperature) {
      out[r] = best;
      continue;
    }
    float floor = -std::numeric_limits<float>::infinity();
    if (p.topK > 0 && p.topK < vocab) {
      sorted.assign(row, row + vocab);
      std::nth_element(sorted.begin(), sorted.begin() + (p.topK - 1), sorted.end(), std::greater<float>());
      floor = sorted[p.topK - 1];  // ties at the k-th value are kept
    }
    const float inverse = static_cast<float>(1.0 / p.temperature);
    double total = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      weights[v] = row[v] >= floor ? std::exp((row[v] - peak) * inverse) : 0.0f;
      total += weights[v];
    }
    const double target = randoms[r]->UniformOpenClosed() * total;
    double cumulative = 0;
    out[r] = best;
    for (int64_t v = 0; v < vocab; ++v) {
      if (weights[v] <= 0) continue;
      cumulative += weights[v];
      out[r] = v;
      if (cumulative >= target) break;
    }
  }
  return out;
}

}  // namespace

std::vector<int64_t> SampleTokens(const at::Tensor& logitsIn,
                                  const std::vector<SamplingParams>& params,
                                  std::vector<RowRandom*>& randoms) {
  if (logitsIn.is_cpu()) return SampleOnCpu(logitsIn, params, randoms);
  return SampleWithTensorOps(logitsIn, params, randoms);
}

std::vector<int64_t> SampleWithTensorOps(const at::Tensor& logitsIn,
                                         const std::vector<SamplingParams>& params,
                                         std::vector<RowRandom*>& randoms) {
  // The device path: everything stays on the device, and the step waits for it once, when
  // the chosen ids (with a NaN flag) come back to the host.
  const int64_t rows = logitsIn.size(0);
  const int64_t vocab = logitsIn.size(1);
  const auto device = logitsIn.device();
  at::Tensor logits = logitsIn.to(at::kFloat);
  at::Tensor ids = logits.argmax(1);  // greedy rows keep these

  std::vector<int64_t> sampled;  // rows that sample rather than take the argmax
  for (int64_t r = 0; r < rows; ++r) {
    if (params[r].temperature > kGreedyTemperature) sampled.push_back(r);
  }
  if (!sampled.empty()) {
    const int64_t n = static_cast<int64_t>(sampled.size());
    // One upload for every row's settings: row index, 1/T, k-th column, keeps-all, draw.
    at::Tensor settings = at::empty({5, n}, at::kDouble);
    auto set = settings.accessor<double, 2>();
    int64_t topKWidth = 0;  // widest top-k among the rows that restrict the vocabulary
    for (int64_t i = 0; i < n; ++i) {
      const auto& p = params[sampled[i]];
      const int64_t keep = (p.topK <= 0 || p.topK >= vocab) ? vocab : p.topK;
      if (keep < vocab) topKWidth = std::max(topKWidth, keep);
      set[0][i] = static_cast<double>(sampled[i]);
      set[1][i] = 1.0 / p.temperature;
      set[2][i] = keep >= vocab ? 0.0 : static_cast<double>(keep - 1);
      set[3][i] = keep >= vocab ? 1.0 : 0.0;
      set[4][i] = randoms[sampled[i]]->UniformOpenClosed();
    }
    at::Tensor onDevice = Upload(settings, device);
    at::Tensor index = onDevice[0].to(at::kLong);
    at::Tensor scaled = logits.index_select(0, index) * onDevice[1].to(at::kFloat).unsqueeze(1);
    if (topKWidth > 0) {
      // Each row keeps the tokens at or above its own k-th largest value; rows without a
      // top-k keep everything.
      at::Tensor topValues = std::get<0>(scaled.topk(topKWidth, 1, true, true));
      at::Tensor kth = topValues.gather(1, onDevice[2].to(at::kLong).unsqueeze(1));
      kth = kth.masked_fill(onDevice[3].to(at::kBool).unsqueeze(1), -std::numeric_limits<float>::infinity());
      scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
    }
    // Inverse-CDF draw: the first token whose cumulative probability reaches u * total.
    at::Tensor cdf = at::softmax(scaled, 1).cumsum(1);
    at::Tensor total = cdf.select(1, vocab - 1).unsqueeze(1);
    at::Tensor u = onDevice[4].to(at::kFloat).unsqueeze(1) * total;
    at::Tensor chosen = at::searchsorted(cdf, u).clamp_max(vocab - 1).view({n});
    ids = ids.index_copy(0, index, chosen);
  }
  at::Tensor nan = at::isnan(logits).any().to(at::kLong).view({1});
  const at::Tensor host = at::cat({ids, nan}).to(at::kCPU);  // the step's one host sync
  const int64_t* data = host.data_ptr<int64_t>();
  if (data[rows] != 0) throw CodedError(ErrorCode::kInference, "the model produced NaN logits");
  return std::vector<int64_t>(data, data + rows);
}

}  // namespace tsn
