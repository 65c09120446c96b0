#include "runtime/ModelCore.h"

#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "runtime/LayoutCache.h"

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
#if !TSN_NATIVE_ONLY
      if (loaded_.module) ReleaseParameters(*loaded_.module);  // none: built from the archive
#endif
      weightsReleased_ = true;
      const std::string owned = OwnWeights(choice.kernels);
      if (!owned.empty()) choice.note += "; " + owned;
    }
    loaded_.layout.reset();  // unused where the native runtime did not take the weights over
    if (!loaded_.weightsNote.empty()) choice.note += (choice.note.empty() ? "" : "; ") + loaded_.weightsNote;
    // Freed weights and the load-time check's temporaries below glibc's mmap threshold sit
    // in the heap; hand the free pages back so resident memory shows what is held.
    malloc_trim(0);
    record("release");
    decode_ = decode;
    prefix_.Resize(0);
    // The TorchScript forward's first two calls are slow (its profiling executor optimises on
    // them), so that runtime runs them here. The native runtime has no first-call cost to pay
    // ahead: its weights are written (read from the archive, packed or regrouped) before this
    // point, and a request's first call was measured as fast with or without a warm-up (1B
    // Q4_K_M, one thread: the first 2-token request 0.082-0.095 s either way), while the warm-up
    // (a prefill and a decode step, each reading every weight) was 0.23-0.31 s of every load.
    // A TorchScript stepper the load just timed has run its first calls (choice.warm; 13 s of
    // a 1B Q8_0 first load on the baseline family).
    if (choice.runtime != "native" && !choice.warm) {
      GenerateRow row;
      row.prompt.assign(8, warmupToken);
      row.sampling.temperature = 0;
      row.maxNewTokens = 3;
      for (int i = 0; i < 2; ++i) {
        auto warmup = std::make_shared<ScheduledJob>();
        warmup->generation = std::make_shared<Generation>(std::vector<GenerateRow>{row, row});
        warmup->complete = [] {};
        Scheduler(*stepper_, decode_).Serve(warmup, nullptr);
        const Generation& done = *warmup->generation;
        if (done.failed) throw CodedError(done.error.code, done.error.message);
      }
      record("warm-up");
    }
    return {choice.runtime, choice.kernels, choice.note, stepper_->CacheBytesPerRow(), std::move(choice.phases)};
  } catch (...) {
    stepper_.reset();
    throw;
  }
}

std::string ModelCore::LayoutOutcome(const LayoutSource& source) {
  if (source.whole()) return "rows laid out for the " + source.family() + " kernels mapped from " + source.file();
  const std::string why = source.rejected().empty() ? "it holds more runs than this load makes" : source.rejected();
  std::error_code ec;
  std::filesystem::remove(source.file(), ec);  // the next load writes it anew
  return "layout file " + source.file() + " set aside (" + why + "), removed; rows rewritten at load";
}

std::string ModelCore::OwnWeights(const std::string& family) {
  std::shared_ptr<LayoutSource> source = std::move(loaded_.layout);  // its mapping lives on in the rows taken
  if (source && source->family() != family) {
    // Loaded for another family's layout (configure's cap differs from the load's): those rows
    // are rewritten out of the mapping.
    source.reset();
  }
  if (source) {
    const std::string note = stepper_->OwnWeights(source.get());
    return note + (note.empty() ? "" : "; ") + LayoutOutcome(*source);
  }
  if (loaded_.layoutDir.empty()) return stepper_->OwnWeights(nullptr);
  // The first load: the rows stay as they lie while a thread writes their layout (AdoptLayout).
  LayoutSink sink;
  std::string note = stepper_->OwnWeights(&sink);
  if (sink.bytes() == 0) return note;
  std::string why;
  std::unique_ptr<LayoutWriter> writer = LayoutWriter::Start(loaded_.layoutDir, loaded_.digest, loaded_.path, family, std::move(sink), &why);
  std::string layout;
  if (writer) {
    layout = "writing the " + family + " kernels' layout of those rows to " + writer->file() +
             " for later loads (served as they lie until it is written, then from it)";
    layoutPending_ = true;
    std::lock_guard<std::mutex> lock(layoutMutex_);
    layoutWriter_ = std::move(writer);
  } else {
    // Rewritten now, as without a layout directory.
    note = stepper_->OwnWeights(nullptr);
    layout = "layout file not written: " + why;
  }
  return note + (note.empty() ? "" : "; ") + layout;
}

void ModelCore::AdoptLayout() {
  if (!layoutPending_) return;
  std::shared_ptr<LayoutSource> source;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(layoutMutex_);
    if (!layoutWriter_ || layoutWriter_->cancelled()) {
      layoutPending_ = false;  // the model is being disposed
      return;
    }
    const std::shared_future<std::string> done = layoutWriter_->done();
    if (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    error = done.get();
    source = layoutWriter_->layout();
  }
  layoutPending_ = false;
  // A null source (the write failed): the rows are rewritten into memory here, once.
  stepper_->OwnWeights(source.get());
  if (!source) {
    std::fprintf(stderr, "torchserve-node: quantized rows rewritten into memory (%s)\n", error.c_str());
    return;
  }
  const std::string outcome = LayoutOutcome(*source);
  if (source->whole()) {
    source->Populate();  // the checkpoint's pages of those rows are given back by now
    layoutAdopted_->store(true);
  } else {
    std::fprintf(stderr, "torchserve-node: %s\n", outcome.c_str());
  }
}

std::optional<LayoutWrite> ModelCore::LayoutWritten() const {
  std::lock_guard<std::mutex> lock(layoutMutex_);
  if (!layoutWriter_) return std::nullopt;
  return LayoutWrite{layoutWriter_->file(), layoutWriter_->bytes(), layoutWriter_->done(), layoutAdopted_};
}

void ModelCore::Serve(const std::shared_ptr<ScheduledJob>& first) {
  Track(first->generation, true);
  if (!stepper_) {
    first->generation->failed = true;
    first->generation->error = {ErrorCode::kInvalidArgument, "configure() the model before generate()"};
    first->complete();
    return;
  }
  AdoptLayout();
  Scheduler(*stepper_, decode_, &prefix_).Serve(first, [this] {
    AdoptLayout();  // between two steps: no product reads the rows now
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
#if TSN_NATIVE_ONLY
  const int64_t module = 0;  // never loaded in this build
#else
  const int64_t module = loaded_.module ? ModuleWeightBytes(*loaded_.module) : 0;
#endif
  return {module, stepper_ ? stepper_->WeightBytes() : 0};
}

void ModelCore::Release() {
  {
    std::lock_guard<std::mutex> lock(layoutMutex_);
    if (layoutWriter_) layoutWriter_->Cancel();
  }
  thread_->Join();
  {
    std::lock_guard<std::mutex> lock(layoutMutex_);
    layoutWriter_.reset();  // joins the write (cancelled above: at most one chunk more)
  }
  stepper_.reset();
  loaded_.module.reset();
}

}  // namespace tsn
