// A small fork-join team for the native runtime's decode step: the calling (inference)
// thread plus `size - 1` workers run one function together, in dependent phases whose
// chunks of work are claimed dynamically: each chunk runs once, on whichever member claims
// it, so a member the OS deschedules (the event loop or a neighbour wants its core) only
// holds the others up if it is descheduled in the middle of a chunk; the others take its
// share. Waits spin briefly and then yield or sleep, so an idle team costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tsn {

// A number unique among the team phases the calling thread has worked in, for the one it is
// working in now; 0 outside any Phase.
// The inputs a phase's chunks share stay constant within it (the steppers write them in an
// earlier phase, or before the member's first chunk), so a kernel may keep per-thread work
// on them (the quantized activations) for the rest of the phase by this ticket alone.
uint64_t PhaseTicket();
// Whether the calling thread is walking its chunks in order (true outside a phase): a kernel
// may then prefetch past the end of its chunk, into the next one it takes. Each member takes
// a contiguous range of a phase's chunks in order, so this holds until the member has worked
// through its own range and helps with another's (see ThreadTeam::Phase); past the last chunk
// of its range the rows asked for are the next member's, fetched for nothing but harmless.
bool PhaseInOrder();

class ThreadTeam {
 public:
  explicit ThreadTeam(int size);
  ~ThreadTeam();

  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }

  // Runs fn(member) on the first `members` members (the caller is member 0; at most size(),
  // 1 runs fn(0) alone without waking anyone); returns when all are done. fn may call Phase
  // up to `phases` times. Exceptions thrown by fn are not allowed (the kernels do not throw).
  void Run(const std::function<void(int)>& fn, int phases, int members);

  // Inside Run, called by every member for the same phases in the same order: runs each of
  // work(0) .. work(chunks - 1) once on whichever member claims it, and returns when all of
  // them are done (their writes are then visible to every member). The chunks are cut into one
  // contiguous range per member; a member claims its own range's chunks from the front, in
  // order, then the others' from their backs, so a member held up leaves its last chunks to
  // the rest, and one that is not keeps walking its range (its weights' rows ahead of it are
  // its own: PhaseInOrder).
  void Phase(int member, int chunks, const std::function<void(int)>& work);

 private:
  void Work(int member);

  struct alignas(64) Counters {
    std::atomic<int> done{0};
  };
  // A member's range of a phase's chunks: how many were taken from its front (low 32 bits, by
  // the member) and from its back (high 32 bits, by the others), one atomic word so the two
  // never take the same chunk.
  struct alignas(64) Range {
    std::atomic<uint64_t> taken{0};
  };
  // Claims the front (own) or back chunk of `owner`'s range of phase `p` (chunks [first,
  // first + size)); -1 when none is left.
  int Claim(int p, int owner, int first, int size, bool front);

  const int size_;
  std::vector<std::thread> workers_;

  std::mutex wakeMutex_;  // guards job_, round_ and stop_ for sleeping workers
  std::condition_variable wake_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> round_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};
  int members_ = 1;  // taking part in the current Run

  // Set up by Run before the members start; a member's own entry of phaseOf_ is its alone.
  std::unique_ptr<Counters[]> phases_;
  std::unique_ptr<Range[]> ranges_;  // phase p, member m at p * size_ + m
  int phaseCapacity_ = 0;
  std::vector<int> phaseOf_;
};

}  // namespace tsn
