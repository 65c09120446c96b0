#include "steppers/TensorLogits.h"

#include <algorithm>
#include <limits>

#include "common/DeviceMemory.h"
#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

TensorLogits::TensorLogits(const at::Tensor& logits)
    : Logits(logits.size(0), logits.size(1)),
      tensor_(logits.is_cpu() ? logits.to(at::kFloat).contiguous() : logits.to(at::kFloat)) {}

const float* TensorLogits::host() const { return tensor_.is_cpu() ? tensor_.data_ptr<float>() : nullptr; }

std::vector<float> TensorLogits::HostRows(const std::vector<int64_t>& rows) const {
  if (tensor_.is_cpu()) return Logits::HostRows(rows);
  for (int64_t r : rows) {
    if (r < 0 || r >= this->rows()) throw CodedError(ErrorCode::kInference, "sampled row outside the logits");
  }
  const at::Tensor index = Upload(at::tensor(rows, at::kLong), tensor_.device());
  const at::Tensor host = tensor_.index_select(0, index).to(at::kCPU).contiguous();
  const float* data = host.data_ptr<float>();
  return std::vector<float>(data, data + host.numel());
}

std::vector<int64_t> TensorLogits::DrawOnDevice(const std::vector<Draw>& draws) const {
  // Everything stays on the device, and the step waits for it once, when the chosen ids (with
  // a NaN flag) come back to the host.
  const int64_t rows = static_cast<int64_t>(draws.size());
  const int64_t vocab = this->vocab();
  const auto device = tensor_.device();
  bool identity = this->rows() == rows;
  std::vector<int64_t> sources;
  for (int64_t r = 0; r < rows; ++r) {
    if (draws[r].row < 0 || draws[r].row >= this->rows()) {
      throw CodedError(ErrorCode::kInference, "sampled row outside the logits");
    }
    identity = identity && draws[r].row == r;
    sources.push_back(draws[r].row);
  }
  const at::Tensor logits = identity ? tensor_ : tensor_.index_select(0, Upload(at::tensor(sources, at::kLong), device));
  at::Tensor ids = logits.argmax(1);  // greedy rows keep these

  std::vector<int64_t> sampled;  // rows that sample rather than take the argmax
  for (int64_t r = 0; r < rows; ++r) {
    if (draws[r].temperature > 0) sampled.push_back(r);
  }
  if (!sampled.empty()) {
    const int64_t n = static_cast<int64_t>(sampled.size());
    // One upload for every row's settings: row index, 1/T, k-th column, keeps-all, draw.
    at::Tensor settings = at::empty({5, n}, at::kDouble);
    auto set = settings.accessor<double, 2>();
    int64_t topKWidth = 0;  // widest top-k among the rows that restrict the vocabulary
    for (int64_t i = 0; i < n; ++i) {
      const Draw& p = draws[sampled[i]];
      const int64_t keep = (p.topK <= 0 || p.topK >= vocab) ? vocab : p.topK;
      if (keep < vocab) topKWidth = std::max(topKWidth, keep);
      set[0][i] = static_cast<double>(sampled[i]);
      set[1][i] = 1.0 / p.temperature;
      set[2][i] = keep >= vocab ? 0.0 : static_cast<double>(keep - 1);
      set[3][i] = keep >= vocab ? 1.0 : 0.0;
      set[4][i] = p.uniform;
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

at::Tensor LogitsTensor(const Logits& logits) {
  if (const auto* tensor = dynamic_cast<const TensorLogits*>(&logits)) return tensor->tensor().to(at::kCPU).clone();
  return at::from_blob(const_cast<float*>(logits.host()), {logits.rows(), logits.vocab()}, at::kFloat).clone();
}

}  // namespace tsn
