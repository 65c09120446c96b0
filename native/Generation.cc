#include "Generation.h"

namespace tsn {

Generation::Generation(std::vector<GenerateRow> rows)
    : outputs(rows.size()), rows_(std::move(rows)), cancelled_(new std::atomic<bool>[rows_.size()]) {
  for (size_t i = 0; i < rows_.size(); ++i) cancelled_[i].store(false);
}

void Generation::Cancel(int64_t row) {
  if (row < 0) {
    for (size_t i = 0; i < rows_.size(); ++i) cancelled_[i].store(true);
  } else if (static_cast<size_t>(row) < rows_.size()) {
    cancelled_[row].store(true);
  }
}

bool Generation::Cancelled(size_t row) const { return cancelled_[row].load(); }

bool Generation::Push(size_t row, int32_t token) {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  pending_.push_back(static_cast<int32_t>(row));
  pending_.push_back(token);
  if (noticePending_) return false;
  noticePending_ = true;
  return true;
}

std::vector<int32_t> Generation::Drain() {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  std::vector<int32_t> taken;
  taken.swap(pending_);
  noticePending_ = false;
  return taken;
}

}  // namespace tsn
