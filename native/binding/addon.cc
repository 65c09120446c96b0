// Module entry: the raw binding typed in src/native/types.ts.
#include <napi.h>
#include <torch/version.h>

#include "binding/AddonData.h"
#include "binding/LoadWorker.h"
#include "binding/TorchModel.h"
#if !TSN_NATIVE_ONLY
#include "common/Device.h"
#endif
#include "common/ErrorCodes.h"
#include "kernels/Kernels.h"
#include "runtime/Runtime.h"
#include "steppers/NativeRegistry.h"

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
  // "auto"'s rule, for tests: decideRuntime(family, nativeSeconds, scriptSeconds, scriptStopped).
  exports.Set("decideRuntime", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    RuntimeTimings timings;
    timings.native = info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : 0;
    timings.script = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 0;
    timings.scriptStopped = info[3].IsBoolean() && info[3].As<Napi::Boolean>().Value();
    const RuntimeVerdict verdict = DecideRuntime(info[0].ToString().Utf8Value(), timings);
    Napi::Object out = Napi::Object::New(info.Env());
    out.Set("runtime", verdict.native ? "native" : "torchscript");
    out.Set("timed", NeedsTiming(info[0].ToString().Utf8Value()));
    out.Set("reason", verdict.reason);
    return out;
  }));
  // Built without libtorch (TSN_NATIVE_ONLY): language models on the CPU, opened with
  // deferModule and served where NativeFromArchive allows (src/native/binding.ts,
  // loadNativeAddon); anything else rejects with ERR_NEEDS_LIBTORCH.
#if TSN_NATIVE_ONLY
  exports.Set("withoutLibtorch", Napi::Boolean::New(env, true));
#else
  exports.Set("withoutLibtorch", Napi::Boolean::New(env, false));
  exports.Set("cudaAvailable", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return Napi::Boolean::New(info.Env(), CudaAvailable());
  }));
  exports.Set("cudaDeviceCount", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), CudaDeviceCount());
  }));
  exports.Set("loadModule", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return LoadModel(info, false);
  }));
#endif
  exports.Set("loadLanguageModel", Napi::Function::New(env, [](const Napi::CallbackInfo& info) {
    return LoadModel(info, true);
  }));
  return exports;
}

}  // namespace tsn

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return tsn::Init(env, exports); }

NODE_API_MODULE(torchserve, InitAddon)
