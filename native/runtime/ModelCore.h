// A loaded language model's state and the work its inference thread does with it: choosing
// and warming up the runtime, and serving generation jobs (queued jobs join the running
// decode loop where the runtime allows). No Napi values: TorchModel is its JavaScript face.
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "runtime/Checkpoint.h"
#include "runtime/Generation.h"
#include "runtime/InferenceThread.h"
#include "runtime/LayoutCache.h"
#include "runtime/PrefixCache.h"
#include "runtime/Runtime.h"
#include "runtime/Scheduler.h"
#include "steppers/Stepper.h"

namespace tsn {

struct ConfigureResult {
  std::string runtime;  // "native" or "torchscript"
  std::string kernels;  // the native kernel family; empty for TorchScript
  std::string note;     // why "auto" did not choose native, when it did not
  int64_t kvBytesPerRow = 0;  // the chosen stepper's cache bytes per row
  std::vector<std::pair<std::string, double>> phases;  // seconds per step of configuring, in order
};

// A layout file being written (runtime/LayoutCache.h): where, how large, its outcome ("" written),
// and whether the stepper reads its runs now (the first safe point after the write takes them).
struct LayoutWrite {
  std::string file;
  size_t bytes = 0;
  std::shared_future<std::string> done;
  std::shared_ptr<const std::atomic<bool>> adopted;
};

class ModelCore {
 public:
  ModelCore(LoadedModel&& loaded, int threads);

  const LoadedModel& loaded() const { return loaded_; }
  int threads() const { return threads_; }
  InferenceThread& thread() { return *thread_; }

  // Inference thread: chooses the runtime, then warms it up (the first TorchScript calls
  // after load are slow). Throws a CodedError on failure, leaving the model unconfigured.
  ConfigureResult Configure(const RuntimeRequest& request, const DecodeSettings& decode, int64_t warmupToken);

  // Inference thread: serves `first` and the generation jobs queued behind it.
  void Serve(const std::shared_ptr<ScheduledJob>& first);

  // Any thread: a job is running (or queued) / done; teardown cancels the tracked ones.
  void Track(const std::shared_ptr<Generation>& job, bool running);
  void CancelAll();

  // Any thread: the prefix cache's running totals.
  PrefixCacheStats PrefixStats() const { return prefix_.Stats(); }

  // JS thread, after the inference thread has exited: releases the model.
  void Release();

  // Inference thread: bytes of weights held by the module and by the chosen runtime.
  std::pair<int64_t, int64_t> WeightBytes() const;
  // Inference thread: whether the module's parameters were released for the native runtime.
  bool WeightsReleased() const { return weightsReleased_; }
  // Any thread: the layout file this load is writing, if any.
  std::optional<LayoutWrite> LayoutWritten() const;

 private:
  LoadedModel loaded_;
  int threads_ = 0;  // intra-op threads asked for at load
  std::unique_ptr<InferenceThread> thread_;
  // Inference thread only:
  std::unique_ptr<Stepper> stepper_;
  bool weightsReleased_ = false;
  DecodeSettings decode_;
  PrefixCache prefix_;  // which slots hold which prompt prefixes (counters: any thread)
  std::mutex jobsMutex_;  // guards jobs_
  std::set<std::shared_ptr<Generation>> jobs_;
  mutable std::mutex layoutMutex_;  // guards layoutWriter_
  std::unique_ptr<LayoutWriter> layoutWriter_;
  // Inference thread: rows left as they lie for the layout file being written (AdoptLayout).
  bool layoutPending_ = false;
  std::shared_ptr<std::atomic<bool>> layoutAdopted_ = std::make_shared<std::atomic<bool>>(false);

  // Inference thread: the stepper takes its weights over (Stepper::OwnWeights), its rewritten
  // rows from a layout file or into one; returns the note.
  std::string OwnWeights(const std::string& family);
  // Inference thread, between two steps: once the layout file of the rows left as they lie is
  // written, the stepper takes its runs in their place (or, where it could not be written,
  // rewrites them into memory).
  void AdoptLayout();
  // The note on a layout source the stepper has taken runs from; a file set aside is removed.
  static std::string LayoutOutcome(const LayoutSource& source);
};

}  // namespace tsn
