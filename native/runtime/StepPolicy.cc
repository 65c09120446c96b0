#include "runtime/StepPolicy.h"

#include <algorithm>
#include <numeric>

namespace tsn {

StepPolicy::StepPolicy(int64_t stepTokens, int64_t prefillPerDecode)
    : stepTokens_(stepTokens), prefillPerDecode_(prefillPerDecode) {}

std::vector<int64_t> StepPolicy::Plan(const std::vector<StepDemand>& rows) const {
  std::vector<int64_t> feed(rows.size(), 0);
  if (stepTokens_ <= 0) {
    for (size_t i = 0; i < rows.size(); ++i) feed[i] = rows[i].pending;
    return feed;
  }
  // Decodes first: a running stream never waits for somebody else's prompt.
  int64_t used = 0;
  std::vector<size_t> prefilling;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].pending == 1) {
      feed[i] = 1;
      ++used;
    } else if (rows[i].pending > 1) {
      prefilling.push_back(i);
    }
  }
  if (prefilling.empty()) return feed;
  std::stable_sort(prefilling.begin(), prefilling.end(),
                   [&](size_t a, size_t b) { return rows[a].arrival < rows[b].arrival; });
  int64_t left = stepTokens_ - used;
  const bool prefillBound = static_cast<double>(prefilling.size()) >= kWaitingServedRatio * static_cast<double>(used);
  if (used > 0 && prefillPerDecode_ > 0 && !prefillBound) left = std::min(left, std::max(kMinChunk, prefillPerDecode_ * used));
  left = std::max(left, std::min(kMinChunk, stepTokens_));  // prompts always progress
  for (size_t i : prefilling) {
    if (left <= 0) break;
    feed[i] = std::min(rows[i].pending, left);
    left -= feed[i];
  }
  return feed;
}

}  // namespace tsn
