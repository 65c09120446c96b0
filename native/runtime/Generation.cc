#include "runtime/Generation.h"

#include <condition_variable>

namespace tsn {

namespace {
// Wakes inference threads waiting for a mask. One for the process: a spurious wake-up of
// another model's loop only makes it look at its rows once more.
std::mutex signalMutex;  // guards signalVersion
std::condition_variable signalCondition;
uint64_t signalVersion = 0;

void Signal() {
  {
    std::lock_guard<std::mutex> lock(signalMutex);
    ++signalVersion;
  }
  signalCondition.notify_all();
}
}  // namespace

uint64_t Generation::SignalCount() {
  std::lock_guard<std::mutex> lock(signalMutex);
  return signalVersion;
}

void Generation::WaitForSignal(uint64_t seen, std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(signalMutex);
  signalCondition.wait_for(lock, timeout, [seen] { return signalVersion != seen; });
}

Generation::Generation(std::vector<GenerateRow> rows)
    : outputs(rows.size()), cachedTokens(rows.size(), 0), rows_(std::move(rows)), cancelled_(new std::atomic<bool>[rows_.size()]) {
  for (size_t i = 0; i < rows_.size(); ++i) {
    cancelled_[i].store(false);
    wantsLogprobs_ = wantsLogprobs_ || rows_[i].sampling.logprobs >= 0;
  }
  masks_.resize(rows_.size());
  maskReady_.assign(rows_.size(), 0);
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!rows_[i].constrained) continue;
    masks_[i] = rows_[i].mask;
    maskReady_[i] = 1;
  }
}

void Generation::SetMask(size_t row, std::vector<int32_t> mask) {
  if (row >= rows_.size()) return;
  {
    std::lock_guard<std::mutex> lock(maskMutex_);
    masks_[row] = std::move(mask);
    maskReady_[row] = 1;
  }
  Signal();
}

bool Generation::TakeMask(size_t row, std::vector<int32_t>& out) {
  std::lock_guard<std::mutex> lock(maskMutex_);
  if (!maskReady_[row]) return false;
  out.swap(masks_[row]);
  maskReady_[row] = 0;
  return true;
}

void Generation::Cancel(int64_t row) {
  if (row < 0) {
    for (size_t i = 0; i < rows_.size(); ++i) cancelled_[i].store(true);
  } else if (static_cast<size_t>(row) < rows_.size()) {
    cancelled_[row].store(true);
  }
  Signal();
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
