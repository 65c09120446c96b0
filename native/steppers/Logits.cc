#include "steppers/Logits.h"

#include <algorithm>
#include <stdexcept>

#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

std::vector<float> Logits::HostRows(const std::vector<int64_t>& rows) const {
  const float* data = host();
  if (data == nullptr) throw std::logic_error("logits on a device must copy their own rows");
  std::vector<float> out(rows.size() * static_cast<size_t>(vocab_));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= rows_) throw CodedError(ErrorCode::kInference, "sampled row outside the logits");
    std::copy_n(data + rows[i] * vocab_, vocab_, out.data() + i * vocab_);
  }
  return out;
}

std::vector<int64_t> Logits::DrawOnDevice(const std::vector<Draw>& /*draws*/) const {
  throw std::logic_error("host logits are sampled on the CPU");
}

}  // namespace tsn
