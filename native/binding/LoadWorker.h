// Loads a checkpoint on the libuv pool (a short, one-off job) and resolves to a TorchModel.
#pragma once

#include <napi.h>

#include <string>
#include <vector>

#include "common/Errors.h"
#include "runtime/Checkpoint.h"

namespace tsn {

struct LoadRequest {
  std::string path;
  std::string device = "cpu";
  std::vector<std::string> extraFiles;
  int threads = 0;
  bool languageModel = false;
  bool mapWeights = true;        // on the CPU: the weight records used where they lie (common/MappedFile.h)
  std::string layoutDir;  // "layoutCache": where layout files are looked for (runtime/LayoutCache.h)
  std::string kernels = "auto";  // the cap configure will be given (which rows it lays out anew)
  // A language model on the CPU: open the archive without libtorch and leave its module to
  // configure, which may serve without it (OpenCheckpoint, ChooseRuntime).
  bool deferModule = false;
};

class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, LoadRequest request);
  Napi::Promise Promise() const { return deferred_.Promise(); }

 protected:
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& error) override;

 private:
  Napi::Promise::Deferred deferred_;
  LoadRequest request_;
  LoadedModel loaded_;
  ErrorInfo failure_;
};

// loadModule(path, options) / loadLanguageModel(path, options): never throw, always a Promise.
Napi::Value LoadModel(const Napi::CallbackInfo& info, bool languageModel);

}  // namespace tsn
