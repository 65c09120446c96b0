// Module entry: the raw binding typed in src/native/types.ts.
#include <napi.h>
#include <torch/version.h>

#include "AddonData.h"
#include "Device.h"
#include "ErrorCodes.h"
#include "Kernels.h"
#include "LoadWorker.h"
#include "Runtime.h"
#include "TorchModel.h"

namespace tsn {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->torchModel = Napi::Persistent(TorchModel::Define(env));
  env.SetInstanceData<AddonData>(data);

  exports.Set("torchVersion", Napi::String::New(env, TORCH_VERSION));
  Napi::Array codes = Napi::Array::New(env);
  for (const char* code : ErrorCode::kAll) codes.Set(codes.Length(), code);
  exports.Set("errorCodes", codes);
  Napi::Array families = Napi::Array::New(env);
  for (const auto& family : SupportedKernelFamilies()) families.Set(families.Length(), family);
  exports.Set("kernelFamilies", families);
  Napi::Array architectures = Napi::Array::New(env);
  for (const auto& name : NativeArchitectures()) architectures.Set(architectures.Length(), name);
  exports.Set("nativeArchitectures", architectures);
  exports.Set("cudaAvailable", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), CudaAvailable());
  }));
  exports.Set("cudaDeviceCount", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), CudaDeviceCount());
  }));
  exports.Set("loadModule", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return LoadModel(info, false);
  }));
  exports.Set("loadLanguageModel", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return LoadModel(info, true);
  }));
  return exports;
}

}  // namespace tsn

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tsn::Init(env, exports); }

NODE_API_MODULE(torchserve, InitAddon)
