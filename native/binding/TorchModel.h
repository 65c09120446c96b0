// The JavaScript face of a loaded checkpoint. Every blocking libtorch call returns a
// Promise and runs on the model's own InferenceThread (ModelCore holds what it works on);
// answers come back through its Mailbox. Raw and internal: src/engine and src/recsys wrap it.
#pragma once

#include <napi.h>

#include <memory>

#include "binding/Mailbox.h"
#include "runtime/Checkpoint.h"
#include "runtime/InferenceThread.h"
#include "runtime/ModelCore.h"

namespace tsn {

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
  // {module, runtime}: bytes of weights the module and the chosen runtime hold (a Promise).
  Napi::Value WeightBytes(const Napi::CallbackInfo& info);
  // null, or {file, bytes, error} once the layout file this load writes is written ("" error)
  // or not (runtime/LayoutCache.h); a Promise.
  Napi::Value LayoutWritten(const Napi::CallbackInfo& info);
  Napi::Value ExtraFiles(const Napi::CallbackInfo& info);
  Napi::Value Device(const Napi::CallbackInfo& info);
  Napi::Value PrefixCacheStats(const Napi::CallbackInfo& info);

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
