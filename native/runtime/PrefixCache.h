// Automatic prefix caching over the stepper's cache slots: a slot whose row finished keeps
// its keys and values, and this index remembers the tokens they were computed from
// (positions 0..n-1). A new row whose prompt starts with some slot's tokens starts at the
// matched length instead of position 0 (Scheduler's admission). Cached slots are ordinary
// free slots to the Scheduler: it takes uncached ones first and evicts cached ones least
// recently used, so caching never makes a request wait.
// Lives as long as the model (ModelCore), across Scheduler::Serve calls; inference thread
// only, except the counters, which any thread may read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tsn {

struct PrefixMatch {
  int64_t slot = -1;    // -1: none
  int64_t length = 0;   // positions of the slot's cache that equal the prompt's
};

struct PrefixCacheStats {
  uint64_t queriedTokens = 0;  // prompt tokens of the rows that looked up a prefix
  uint64_t hitTokens = 0;      // of those, tokens served from a cached prefix
  uint64_t evictions = 0;      // cached slots given to rows that did not reuse them
};

class PrefixCache {
 public:
  // Shorter matches are not reused: the copy or the evicted entry is worth more than the
  // few positions saved.
  static constexpr int64_t kMinReuse = 8;

  // The stepper's cache now has `slots` slots; a different count than before means a new
  // cache (or a new layout): every entry is dropped.
  void Resize(size_t slots);
  // Drops every entry (a failed step leaves the cache's contents unknown).
  void Clear();

  // The cached slot among `candidates` (free slots) with the longest common prefix with
  // `tokens`, limited to `limit` positions; length 0 when none reaches kMinReuse.
  PrefixMatch Longest(const std::vector<int64_t>& tokens, int64_t limit, const std::vector<size_t>& candidates) const;
  // Slot `slot` now holds the keys and values of `tokens` (positions 0..size-1).
  void Remember(size_t slot, std::vector<int64_t> tokens);
  // Slot `slot` is being reused by a row: its entry no longer describes it. `evicted`:
  // counted as an eviction (the row did not reuse its content).
  void Forget(size_t slot, bool evicted);
  bool Holds(size_t slot) const { return slot < entries_.size() && !entries_[slot].tokens.empty(); }
  // Order of preference among cached slots: lower is the older use.
  uint64_t LastUse(size_t slot) const { return entries_[slot].lastUse; }

  void CountQuery(int64_t queried, int64_t hit);
  PrefixCacheStats Stats() const;

 private:
  struct Entry {
    std::vector<int64_t> tokens;
    uint64_t lastUse = 0;
  };
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
  std::atomic<uint64_t> queried_{0}, hits_{0}, evictions_{0};
};

// Common prefix length of a and b, at most `limit`.
int64_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int64_t limit);

}  // namespace tsn
