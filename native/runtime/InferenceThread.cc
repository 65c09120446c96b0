#include "runtime/InferenceThread.h"

#include <dlfcn.h>

#if !TSN_NATIVE_ONLY
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#endif

namespace tsn {

#if !TSN_NATIVE_ONLY
namespace {

// OpenBLAS ignores at::set_num_threads; reach it directly when it is the BLAS in use.
void SetBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    fn(threads);
  }
}

}  // namespace
#endif

InferenceThread::InferenceThread(c10::Device device, int intraOpThreads)
    : device_(device), intraOpThreads_(intraOpThreads) {
  thread_ = std::thread([this] { Loop(); });
}

InferenceThread::~InferenceThread() { StopAndJoin(); }

bool InferenceThread::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

std::shared_ptr<void> InferenceThread::TakeBatchable() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tasks_.empty() || !tasks_.front().batchable) return nullptr;
  std::shared_ptr<void> payload = std::move(tasks_.front().batchable);
  tasks_.pop_front();
  return payload;
}

void InferenceThread::RequestStop(std::function<void()> onExit, bool abandonQueued) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    onExit_ = std::move(onExit);
    // Under the lock, so their answers are posted before the thread can exit and post its own.
    if (abandonQueued) {
      for (auto& task : tasks_) {
        if (task.abandon) task.abandon();
      }
      tasks_.clear();
    }
  }
  wake_.notify_one();
}

void InferenceThread::StopAndJoin() {
  RequestStop(nullptr, true);
  Join();
}

void InferenceThread::Join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void InferenceThread::Loop() {
#if !TSN_NATIVE_ONLY
  if (intraOpThreads_ > 0) {
    at::set_num_threads(intraOpThreads_);
    SetBlasThreads(intraOpThreads_);
  }
  c10::InferenceMode inferenceMode;
  c10::OptionalDeviceGuard deviceGuard;
  if (!device_.is_cpu()) deviceGuard.reset_device(device_);
#endif

  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) break;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task.run();  // tasks catch their own exceptions
  }

  std::function<void()> onExit;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    onExit.swap(onExit_);
  }
  if (onExit) onExit();
}

}  // namespace tsn
