// The JavaScript face of a loaded checkpoint. Every blocking libtorch call returns a
// Promise and runs on the model's own InferenceThread; answers come back through its
// Mailbox. Raw and internal: src/engine and src/recsys wrap it.
#pragma once

#include <napi.h>

#include <memory>
#include <set>

#include "Checkpoint.h"
#include "Scheduler.h"
#include "InferenceThread.h"
#include "Mailbox.h"
#include "Stepper.h"

namespace tsn {

// State the inference thread uses; tasks hold it by shared_ptr.
struct ModelCore {
  LoadedModel loaded;
  int threads = 0;  // intra-op threads asked for at load
  std::unique_ptr<InferenceThread> thread;
  // Inference thread only:
  std::unique_ptr<Stepper> stepper;
  DecodeSettings decode;
  std::string runtime = "unconfigured";
  // Jobs started or queued, so teardown can cancel them.
  std::mutex jobsMutex;  // guards jobs
  std::set<std::shared_ptr<Generation>> jobs;
};

class TorchModel : public Napi::ObjectWrap<TorchModel> {
 public:
  static Napi::Function Define(Napi::Env env);
  // `loaded` is consumed. Called on the JS thread by the load worker.
  static Napi::Object NewInstance(Napi::Env env, LoadedModel&& loaded, int threads, bool languageModel);

  explicit TorchModel(const Napi::CallbackInfo& info);
  ~TorchModel() override;

 private:
  Napi::Value Run(const Napi::CallbackInfo& info);
  Napi::Value Generate(const Napi::CallbackInfo& info);
  Napi::Value Configure(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value ExtraFiles(const Napi::CallbackInfo& info);
  Napi::Value Device(const Napi::CallbackInfo& info);

  // An answer is owed: keep the event loop and this wrapper alive until Settle.
  void Hold(Napi::Env env);
  void Settle(Napi::Env env);
  // Posts a task that ends by posting a letter which calls Settle. False once disposing.
  bool Submit(Napi::Env env, InferenceThread::Task task);
  void Teardown();

  std::shared_ptr<ModelCore> core_;
  std::shared_ptr<Mailbox> mailbox_;
  bool languageModel_ = false;
  bool disposing_ = false;
  bool disposed_ = false;
  bool envTearingDown_ = false;
  std::vector<Napi::Promise::Deferred> disposeWaiters_;
  std::unique_ptr<Napi::Env::CleanupHook<std::function<void()>>> cleanupHook_;
};

}  // namespace tsn
