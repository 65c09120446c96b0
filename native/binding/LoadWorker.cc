#include "binding/LoadWorker.h"

#include "binding/TorchModel.h"
#include "common/ErrorCodes.h"
#include "runtime/ArchiveWeights.h"

namespace tsn {

LoadWorker::LoadWorker(Napi::Env env, LoadRequest request)
    : Napi::AsyncWorker(env, "torchserve-node:load"),
      deferred_(Napi::Promise::Deferred::New(env)),
      request_(std::move(request)) {}

void LoadWorker::Execute() {
  try {
#if TSN_NATIVE_ONLY
    // This build opens a language model's archive on the CPU and nothing else.
    if (!request_.languageModel || request_.device != "cpu") {
      throw CodedError(ErrorCode::kNeedsLibtorch, "this addon is built without libtorch: it opens language models on the CPU");
    }
    try {
      loaded_ = OpenCheckpoint(request_.path, request_.extraFiles, request_.mapWeights, request_.kernels, request_.layoutDir);
    } catch (const std::exception& e) {
      throw CodedError(ErrorCode::kNeedsLibtorch, std::string("not an archive this addon opens without libtorch: ") + e.what());
    }
#else
    if (request_.deferModule && request_.languageModel && request_.device == "cpu") {
      try {
        loaded_ = OpenCheckpoint(request_.path, request_.extraFiles, request_.mapWeights, request_.kernels, request_.layoutDir);
        return;
      } catch (const std::exception&) {
        // Not an archive this reader takes: LoadCheckpoint's errors say what is wrong with it.
      }
    }
    loaded_ = LoadCheckpoint(request_.path, request_.device, request_.extraFiles, request_.languageModel,
                             request_.mapWeights, request_.kernels, request_.layoutDir);
#endif
  } catch (...) {
    failure_ = CurrentError(ErrorCode::kCheckpointInvalid);
    SetError(failure_.message);
  }
}

void LoadWorker::OnOK() {
  Napi::Env env = Env();
  try {
    deferred_.Resolve(
        TorchModel::NewInstance(env, std::move(loaded_), request_.threads, request_.languageModel));
  } catch (const Napi::Error& error) {
    deferred_.Reject(error.Value());
  }
}

void LoadWorker::OnError(const Napi::Error&) { deferred_.Reject(MakeError(Env(), failure_).Value()); }

Napi::Value LoadModel(const Napi::CallbackInfo& info, bool languageModel) {
  Napi::Env env = info.Env();
  LoadRequest request;
  request.languageModel = languageModel;
  if (info.Length() < 1 || !info[0].IsString()) {
    auto deferred = Napi::Promise::Deferred::New(env);
    deferred.Reject(MakeError(env, {ErrorCode::kInvalidArgument, "the checkpoint path must be a string"}).Value());
    return deferred.Promise();
  }
  request.path = info[0].As<Napi::String>().Utf8Value();
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object options = info[1].As<Napi::Object>();
    if (options.Get("device").IsString()) request.device = options.Get("device").As<Napi::String>().Utf8Value();
    if (options.Get("threads").IsNumber()) request.threads = options.Get("threads").As<Napi::Number>().Int32Value();
    if (options.Get("kernels").IsString()) request.kernels = options.Get("kernels").As<Napi::String>().Utf8Value();
    if (options.Get("mapWeights").IsBoolean()) request.mapWeights = options.Get("mapWeights").As<Napi::Boolean>().Value();
    if (options.Get("deferModule").IsBoolean()) request.deferModule = options.Get("deferModule").As<Napi::Boolean>().Value();
    if (options.Get("layoutCache").IsString()) request.layoutDir = options.Get("layoutCache").As<Napi::String>().Utf8Value();
    Napi::Value extra = options.Get("extraFiles");
    if (extra.IsArray()) {
      Napi::Array names = extra.As<Napi::Array>();
      for (uint32_t i = 0; i < names.Length(); ++i) {
        if (names.Get(i).IsString()) request.extraFiles.push_back(names.Get(i).As<Napi::String>().Utf8Value());
      }
    }
  }
  auto* worker = new LoadWorker(env, std::move(request));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace tsn
