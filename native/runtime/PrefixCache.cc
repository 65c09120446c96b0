#include "runtime/PrefixCache.h"

#include <algorithm>

namespace tsn {

int64_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t limit) {
  const int64_t n = std::min<int64_t>({limit, static_cast<int64_t>(a.size()), static_cast<int64_t>(b.size())});
  int64_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

void PrefixCache::Resize(size_t slots) {
  if (slots == entries_.size()) return;
  entries_.clear();
  entries_.resize(slots);
}

void PrefixCache::Clear() {
  for (auto& entry : entries_) entry.tokens.clear();
}

PrefixMatch PrefixCache::Longest(const std::vector<int64_t>& tokens, int64_t limit,
                                 const std::vector<size_t>& candidates) const {
  PrefixMatch best;
  for (size_t slot : candidates) {
    if (!Holds(slot)) continue;
    const int64_t length = CommonPrefix(entries_[slot].tokens, tokens, limit);
    if (length >= kMinReuse && length > best.length) best = {static_cast<int64_t>(slot), length};
  }
  return best;
}

void PrefixCache::Remember(size_t slot, std::vector<int64_t> tokens) {
  if (slot >= entries_.size()) return;
  entries_[slot].tokens = static_cast<int64_t>(tokens.size()) >= kMinReuse ? std::move(tokens) : std::vector<int64_t>{};
  entries_[slot].lastUse = ++clock_;
}

void PrefixCache::Forget(size_t slot, bool evicted) {
  if (!Holds(slot)) return;
  entries_[slot].tokens.clear();
  if (evicted) evictions_.fetch_add(1, std::memory_order_relaxed);
}

void PrefixCache::CountQuery(int64_t queried, int64_t hit) {
  queried_.fetch_add(static_cast<uint64_t>(queried), std::memory_order_relaxed);
  hits_.fetch_add(static_cast<uint64_t>(hit), std::memory_order_relaxed);
}

PrefixCacheStats PrefixCache::Stats() const {
  return {queried_.load(std::memory_order_relaxed), hits_.load(std::memory_order_relaxed),
          evictions_.load(std::memory_order_relaxed)};
}

}  // namespace tsn
