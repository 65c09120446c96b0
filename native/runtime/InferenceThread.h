// The one OS thread on which a model runs. Long generation loops live here rather than on
// the libuv pool (which also serves fs, dns, zlib and crypto); libtorch's per-thread
// settings (InferenceMode, intra-op threads) are made once, on this thread.
#pragma once

#include <c10/core/Device.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace tsn {

class InferenceThread {
 public:
  struct Task {
    std::function<void()> run;
    // Called instead of `run` for a task still queued when the thread stops.
    std::function<void()> abandon;
    // Set on tasks that a running task may take over (generation jobs joining a decode loop).
    std::shared_ptr<void> batchable;
  };

  // intraOpThreads <= 0 keeps libtorch's default.
  InferenceThread(c10::Device device, int intraOpThreads);
  ~InferenceThread();

  InferenceThread(const InferenceThread&) = delete;
  InferenceThread& operator=(const InferenceThread&) = delete;

  // False (and the task untouched) once Stop has begun.
  bool Post(Task task);

  // On the thread, from a running task: removes the next queued task and returns its
  // `batchable` payload if it has one; else null (the queue is left as it was). Queue order
  // is kept: a task without a payload at the front stops the taking.
  std::shared_ptr<void> TakeBatchable();

  // Stops accepting; the queued tasks still run (or, with abandonQueued, are abandoned);
  // then the thread calls `onExit` as its last act. Does not wait.
  void RequestStop(std::function<void()> onExit, bool abandonQueued = false);

  // Teardown: RequestStop abandoning queued tasks, then waits for the thread. Idempotent.
  void StopAndJoin();

  // Joins a thread that has already been asked to stop. Idempotent.
  void Join();

 private:
  void Loop();

  c10::Device device_;
  int intraOpThreads_;
  std::mutex mutex_;  // guards tasks_, stopping_, onExit_
  std::condition_variable wake_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::function<void()> onExit_;
  std::thread thread_;
};

}  // namespace tsn
