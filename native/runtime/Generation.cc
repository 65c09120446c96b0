#include "runtime/Generation.h"

namespace tsn {

Generation::Generation(std::vector<GenerateRow> rows)
    : outputs(rows.size()), cachedTokens(rows.size(), 0), rows_(std::move(rows)), cancelled_(new std::atomic<bool>[rows_.size()]) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    cancelled_[i].store(false);
    wantsLogprobs_ = wantsLogprobs_ || rows_[i].sampling.logprobs >= 0;
  }
}

void Generation::Cancel(int64_t row) {
  if (row < 0) {
    for (size_t i = 0; i < rows_.size(); ++i) cancelled_[i].store(true);
  } else if (static_cast<size_t>(row) < rows_.size()) {
    cancelled_[row].store(true);
  }
}

bool Generation::Cancelled(size_t row) const { return cancelled_[row].load(); }

bool Generation::Push(size_t row, const SampledToken& token) {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  pending_.pairs.push_back(static_cast<int32_t>(row));
  pending_.pairs.push_back(static_cast<int32_t>(token.token));
  if (wantsLogprobs_) {
    pending_.logprobs.push_back(token.logprob);
    pending_.topIds.insert(pending_.topIds.end(), token.topIds.begin(), token.topIds.end());
    pending_.topLogprobs.insert(pending_.topLogprobs.end(), token.topLogprobs.begin(), token.topLogprobs.end());
  }
  if (noticePending_) return false;
  noticePending_ = true;
  return true;
}

TokenBatch Generation::Drain() {
  std::lock_guard<std::mutex> lock(pendingMutex_);
  TokenBatch taken;
  std::swap(taken, pending_);
  noticePending_ = false;
  return taken;
}

}  // namespace tsn
