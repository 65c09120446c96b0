#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tsn {

// The most threads loading uses for one piece of its work (reading records, packing,
// widening): 8, or the machine's cores where it has fewer. Loading runs before anything is
// served, so SERVICE_THREADS does not bound it.
inline int64_t LoadThreads() {
  return std::min<int64_t>(8, std::max(1u, std::thread::hardware_concurrency()));
}

// Runs fn(begin, end) over [0, count) in contiguous ranges, on several threads when the work
// writes `bytes` of fresh memory or more: one thread per 8 MB, up to LoadThreads(). Loading
// is mostly such writes (page faults and copies: packing weights into panels, widening a
// 16-bit checkpoint for the load-time check), and they scale with cores.
template <typename Fn>
void SplitAcrossThreads(int64_t count, size_t bytes, Fn&& fn) {
  constexpr size_t kBytesPerThread = size_t{8} << 20;
  const int64_t threads =
      std::clamp<int64_t>(static_cast<int64_t>(bytes / kBytesPerThread), 1, std::min<int64_t>(LoadThreads(), std::max<int64_t>(count, 1)));
  if (threads <= 1) {
    fn(int64_t{0}, count);
    return;
  }
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) {
    helpers.emplace_back([&fn, t, threads, count] { fn(count * t / threads, count * (t + 1) / threads); });
  }
  fn(int64_t{0}, count / threads);
  for (auto& helper : helpers) helper.join();
}

}  // namespace tsn
