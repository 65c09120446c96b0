#include "runtime/ModelCore.h"

#include <malloc.h>

#include <chrono>

#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

ModelCore::ModelCore(LoadedModel&& loaded, int threads)
    : loaded_(std::move(loaded)),
      threads_(threads),
      thread_(std::make_unique<InferenceThread>(loaded_.device, threads)) {}

ConfigureResult ModelCore::Configure(const RuntimeRequest& request, const DecodeSettings& decode,
                                     int64_t warmupToken) {
  if (weightsReleased_) {
    throw CodedError(ErrorCode::kInvalidArgument,
                     "the model was configured already, and the module's weights released for the native runtime: "
                     "load the checkpoint again to configure it anew");
  }
  try {
    stepper_.reset();  // the previous runtime's weights go before the next one packs its own
    RuntimeChoice choice = ChooseRuntime(loaded_, request);
    auto lap = std::chrono::steady_clock::now();
    const auto record = [&](const char* name) {
      const auto now = std::chrono::steady_clock::now();
      choice.phases.emplace_back(name, std::chrono::duration<double>(now - lap).count());
      lap = now;
    };
    stepper_ = std::move(choice.stepper);
    if (choice.runtime == "native" && request.releaseModuleWeights) {
      // The native runtime packed its own copy: the module's parameters are not read again.
      ReleaseParameters(*loaded_.module);
      weightsReleased_ = true;
      const std::string owned = stepper_->OwnWeights();
      if (!owned.empty()) choice.note += "; " + owned;
    }
    // Freed weights and the load-time check's temporaries below glibc's mmap threshold sit
    // in the heap; hand the free pages back so resident memory shows what is held.
    malloc_trim(0);
    record("release");
    decode_ = decode;
    prefix_.Resize(0);
    GenerateRow row;
    // The TorchScript forward's first two calls are slow (profiling); the native runtime's
    // first call only touches its buffers once, and a prefill (two rows of two tokens: the
    // multi-row products) and one decode step reach them all. Each step reads every weight:
    // at 1B a third step was ~0.5 s of the load, and prompts of 8 tokens ~0.3 s more.
    row.prompt.assign(choice.runtime == "native" ? 2 : 8, warmupToken);
    row.sampling.temperature = 0;
    row.maxNewTokens = choice.runtime == "native" ? 2 : 3;
    const int rounds = choice.runtime == "native" ? 1 : 2;
    for (int i = 0; i < rounds; ++i) {
      auto warmup = std::make_shared<ScheduledJob>();
      warmup->generation = std::make_shared<Generation>(std::vector<GenerateRow>{row, row});
      warmup->complete = [] {};
      Scheduler(*stepper_, decode_).Serve(warmup, nullptr);
      const Generation& done = *warmup->generation;
      if (done.failed) throw CodedError(done.error.code, done.error.message);
    }
    record("warm-up");
    return {choice.runtime, choice.kernels, choice.note, stepper_->CacheBytesPerRow(), std::move(choice.phases)};
  } catch (...) {
    stepper_.reset();
    throw;
  }
}

void ModelCore::Serve(const std::shared_ptr<ScheduledJob>& first) {
  Track(first->generation, true);
  if (!stepper_) {
    first->generation->failed = true;
    first->generation->error = {ErrorCode::kInvalidArgument, "configure() the model before generate()"};
    first->complete();
    return;
  }
  Scheduler(*stepper_, decode_, &prefix_).Serve(first, [this] {
    auto next = std::static_pointer_cast<ScheduledJob>(thread_->TakeBatchable());
    if (next) Track(next->generation, true);
    return next;
  });
}

void ModelCore::Track(const std::shared_ptr<Generation>& job, bool running) {
  std::lock_guard<std::mutex> lock(jobsMutex_);
  if (running) {
    jobs_.insert(job);
  } else {
    jobs_.erase(job);
  }
}

void ModelCore::CancelAll() {
  std::lock_guard<std::mutex> lock(jobsMutex_);
  for (const auto& job : jobs_) job->Cancel(-1);
}

std::pair<int64_t, int64_t> ModelCore::WeightBytes() const {
  return {ModuleWeightBytes(*loaded_.module), stepper_ ? stepper_->WeightBytes() : 0};
}

void ModelCore::Release() {
  thread_->Join();
  stepper_.reset();
  loaded_.module.reset();
}

}  // namespace tsn
