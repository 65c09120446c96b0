#pragma once

#include <algorithm>
#include <atomic>
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

// fn(item) for each of `items`, the largest (by size(item)) first, on up to `threads` threads
// each taking the next in turn: reading or paging in a checkpoint's records, whose sizes vary
// by orders of magnitude. Sorts `items`.
template <typename Item, typename Size, typename Fn>
void LargestFirst(std::vector<Item>& items, int threads, Size&& size, Fn&& fn) {
  std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) { return size(a) > size(b); });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < items.size(); i = next++) fn(items[i]);
  };
  std::vector<std::thread> helpers;
  const int count = std::clamp<int>(threads, 1, static_cast<int>(std::max<size_t>(1, items.size())));
  for (int t = 1; t < count; ++t) helpers.emplace_back(work);
  work();
  for (auto& helper : helpers) helper.join();
}

}  // namespace tsn
