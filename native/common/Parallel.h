#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tsn {

// Runs fn(begin, end) over [0, count) in contiguous ranges, on several threads when the work
// writes `bytes` of fresh memory or more: one thread per 8 MB, up to 8 and the machine's
// cores. Loading is mostly such writes (page faults and copies: packing weights into panels,
// widening a 16-bit checkpoint for the load-time check), and they scale with cores.
template <typename Fn>
void SplitAcrossThreads(int64_t count, size_t bytes, Fn&& fn) {
  constexpr size_t kBytesPerThread = size_t{8} << 20;
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads =
      std::clamp<int64_t>(static_cast<int64_t>(bytes / kBytesPerThread), 1, std::min<int64_t>({8, hardware, std::max<int64_t>(count, 1)}));
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
