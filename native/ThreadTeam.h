// A small fork-join team for the native runtime's decode step: the calling (inference)
// thread plus `size - 1` workers run one function together, meeting at barriers between
// dependent phases. Waits spin briefly and then yield or sleep, so an idle team costs no
// CPU and an oversubscribed machine is not starved by spinning.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tsn {

class ThreadTeam {
 public:
  explicit ThreadTeam(int size);
  ~ThreadTeam();

  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }

  // Runs fn(member) on every member (the caller is member 0); returns when all are done.
  // Exceptions thrown by fn are not allowed (the kernels do not throw).
  void Run(const std::function<void(int)>& fn);

  // Inside Run: returns when every member has reached it.
  void Barrier();

  // [begin, end) of `count` items for `member`, in contiguous, nearly equal shares.
  std::pair<int, int> Share(int count, int member) const;

 private:
  void Work(int member);

  const int size_;
  std::vector<std::thread> workers_;

  std::mutex wakeMutex_;  // guards job_, round_ and stop_ for sleeping workers
  std::condition_variable wake_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> round_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};

  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> barrierPhase_{0};
};

}  // namespace tsn
