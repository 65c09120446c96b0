#include "kernels/ThreadTeam.h"

#include <sched.h>

#include <algorithm>

namespace tsn {

namespace {

inline void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins a little, then yields the core: cheap when every member has a core of its own,
// harmless when they share one.
template <typename Done>
void WaitUntil(Done done) {
  for (int i = 0; i < 4000; ++i) {
    if (done()) return;
    Relax();
  }
  while (!done()) sched_yield();
}

}  // namespace

ThreadTeam::ThreadTeam(int size) : size_(size < 1 ? 1 : size), phaseOf_(size_, 0) {
  for (int member = 1; member < size_; ++member) workers_.emplace_back([this, member] { Work(member); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(wakeMutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadTeam::Run(const std::function<void(int)>& fn, int phases, int members) {
  if (phases > phaseCapacity_) {
    phases_.reset(new Counters[phases]);
    ranges_.reset(new Range[static_cast<size_t>(phases) * size_]);
    phaseCapacity_ = phases;
  }
  members_ = std::clamp(members, 1, size_);
  std::fill(phaseOf_.begin(), phaseOf_.end(), 0);
  if (members_ == 1) {
    fn(0);  // a lone member's phases claim nothing and count nothing (Phase)
    return;
  }
  for (int p = 0; p < phases; ++p) {
    phases_[p].done.store(0, std::memory_order_relaxed);
    for (int m = 0; m < members_; ++m) ranges_[static_cast<size_t>(p) * size_ + m].taken.store(0, std::memory_order_relaxed);
  }
  finished_.store(0);
  {
    // The lock also publishes the counters reset above to the members it wakes.
    std::lock_guard<std::mutex> lock(wakeMutex_);
    job_ = &fn;
    round_.fetch_add(1);
  }
  wake_.notify_all();
  fn(0);
  WaitUntil([this] { return finished_.load(std::memory_order_acquire) == size_ - 1; });
}

namespace {

thread_local uint64_t currentTicket = 0;
thread_local bool currentInOrder = true;

}  // namespace

uint64_t PhaseTicket() { return currentTicket; }
bool PhaseInOrder() { return currentInOrder; }

int ThreadTeam::Claim(int p, int owner, int first, int size, bool front) {
  std::atomic<uint64_t>& taken = ranges_[static_cast<size_t>(p) * size_ + owner].taken;
  uint64_t seen = taken.load(std::memory_order_relaxed);
  for (;;) {
    const int fromFront = static_cast<int>(seen & 0xffffffffu), fromBack = static_cast<int>(seen >> 32);
    if (fromFront + fromBack >= size) return -1;
    const uint64_t next = front ? seen + 1 : seen + (uint64_t{1} << 32);
    if (taken.compare_exchange_weak(seen, next, std::memory_order_relaxed)) {
      return front ? first + fromFront : first + size - 1 - fromBack;
    }
  }
}

void ThreadTeam::Phase(int member, int chunks, const std::function<void(int)>& work) {
  const int p = phaseOf_[member]++;
  // Unique among this thread's phases, which is all a ticket's reader compares (its cache is
  // the thread's own): no shared counter, whose locked increment would wait for this thread's
  // loads in flight, the weight stream's included.
  thread_local uint64_t phasesSeen = 0;
  currentTicket = ++phasesSeen;
  if (members_ == 1) {
    // Alone: every chunk in order, with no claims. A locked instruction per chunk drained the
    // loads in flight at each chunk's end, ~3,000 times a step on a small model.
    for (int chunk = 0; chunk < chunks; ++chunk) work(chunk);
    currentTicket = 0;
    return;
  }
  // Member m's range: chunks [m * chunks / members, (m + 1) * chunks / members).
  const auto first = [&](int owner) { return static_cast<int>(static_cast<int64_t>(owner) * chunks / members_); };
  // Its own range from the front, then what is left of the others' from their backs. Each
  // chunk done is counted at once: a member descheduled between chunks holds nobody up.
  Counters& phase = phases_[p];
  const int mine = first(member), mineSize = first(member + 1) - mine;
  for (int chunk; (chunk = Claim(p, member, mine, mineSize, true)) >= 0;) {
    work(chunk);
    phase.done.fetch_add(1, std::memory_order_release);
  }
  currentInOrder = false;
  for (int i = 1; i < members_; ++i) {
    const int owner = (member + i) % members_;
    const int theirs = first(owner), theirSize = first(owner + 1) - theirs;
    for (int chunk; (chunk = Claim(p, owner, theirs, theirSize, false)) >= 0;) {
      work(chunk);
      phase.done.fetch_add(1, std::memory_order_release);
    }
  }
  currentTicket = 0;
  currentInOrder = true;
  WaitUntil([&] { return phase.done.load(std::memory_order_acquire) >= chunks; });
}

void ThreadTeam::Work(int member) {
  uint64_t seen = 0;
  for (;;) {
    // Between decode steps the next round comes within microseconds: spin first.
    for (int i = 0; i < 20000 && round_.load(std::memory_order_acquire) == seen && !stop_.load(); ++i) Relax();
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(wakeMutex_);
      wake_.wait(lock, [&] { return stop_.load() || round_.load() != seen; });
      if (stop_.load()) return;
      seen = round_.load();
      job = job_;
    }
    if (member < members_) (*job)(member);
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

}  // namespace tsn
