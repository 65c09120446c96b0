#include "binding/TorchModel.h"

#include <cstring>

#include "binding/AddonData.h"
#if !TSN_NATIVE_ONLY
#include "binding/HostValue.h"
#endif
#include "binding/JsArgs.h"
#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

namespace {

struct PendingModel {
  LoadedModel loaded;
  int threads = 0;
  bool languageModel = false;
};

// JS-thread state of one generation; deleted by its completion letter.
struct GenerationJs {
  Napi::Promise::Deferred deferred;
  Napi::FunctionReference onTokens;
};

Napi::Value Rejected(Napi::Env env, const ErrorInfo& error) {
  auto deferred = Napi::Promise::Deferred::New(env);
  deferred.Reject(MakeError(env, error).Value());
  return deferred.Promise();
}

Napi::Int32Array ToInt32Array(Napi::Env env, const std::vector<int32_t>& values) {
  Napi::Int32Array array = Napi::Int32Array::New(env, values.size());
  if (!values.empty()) std::memcpy(array.Data(), values.data(), values.size() * sizeof(int32_t));
  return array;
}

Napi::Float32Array ToFloat32Array(Napi::Env env, const std::vector<float>& values) {
  Napi::Float32Array array = Napi::Float32Array::New(env, values.size());
  if (!values.empty()) std::memcpy(array.Data(), values.data(), values.size() * sizeof(float));
  return array;
}

}  // namespace

Napi::Function TorchModel::Define(Napi::Env env) {
  return DefineClass(env, "TorchModel",
                     {
                         InstanceMethod<&TorchModel::Run>("run"),
                         InstanceMethod<&TorchModel::Generate>("generate"),
                         InstanceMethod<&TorchModel::Configure>("configure"),
                         InstanceMethod<&TorchModel::Dispose>("dispose"),
                         InstanceMethod<&TorchModel::PrefixCacheStats>("prefixCacheStats"),
                         InstanceMethod<&TorchModel::WeightBytes>("weightBytes"),
                         InstanceMethod<&TorchModel::LayoutWritten>("layoutWritten"),
                         InstanceAccessor<&TorchModel::ExtraFiles>("extraFiles"),
                         InstanceAccessor<&TorchModel::Device>("device"),
                     });
}

Napi::Object TorchModel::NewInstance(Napi::Env env, LoadedModel&& loaded, int threads, bool languageModel) {
  PendingModel pending{std::move(loaded), threads, languageModel};
  return env.GetInstanceData<AddonData>()->torchModel.New({Napi::External<PendingModel>::New(env, &pending)});
}

TorchModel::TorchModel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<TorchModel>(info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsExternal()) {
    throw Napi::TypeError::New(env, "TorchModel is created by loadModule() or loadLanguageModel()");
  }
  auto* pending = info[0].As<Napi::External<PendingModel>>().Data();
  core_ = std::make_shared<ModelCore>(std::move(pending->loaded), pending->threads);
  languageModel_ = pending->languageModel;
  mailbox_ = std::make_shared<Mailbox>(env, "torchserve-node model");
  // At process exit, stop the thread before libtorch is unloaded.
  cleanupHook_ = std::make_unique<Napi::Env::CleanupHook<std::function<void()>>>(
      env.AddCleanupHook(std::function<void()>([this] {
        envTearingDown_ = true;
        Teardown();
      })));
}

TorchModel::~TorchModel() {
  if (cleanupHook_ && !envTearingDown_) cleanupHook_->Remove(Env());
  Teardown();
  if (!envTearingDown_) mailbox_->Abort();
}

void TorchModel::Teardown() {
  if (!core_) return;
  core_->CancelAll();
  core_->thread().StopAndJoin();
}

void TorchModel::Hold(Napi::Env env) {
  mailbox_->Hold(env);
  Ref();
}

void TorchModel::Settle(Napi::Env env) {
  mailbox_->Settle(env);
  Unref();
}

bool TorchModel::Submit(Napi::Env env, InferenceThread::Task task) {
  if (disposing_) return false;
  Hold(env);
  if (!core_->thread().Post(std::move(task))) {
    Settle(env);
    return false;
  }
  return true;
}

Napi::Value TorchModel::Run(const Napi::CallbackInfo& info) {
#if TSN_NATIVE_ONLY
  return Rejected(info.Env(), {ErrorCode::kNeedsLibtorch, "run() needs the addon built with libtorch; this one serves generation"});
#else
  Napi::Env env = info.Env();
  std::string method;
  std::vector<HostValue> args;
  try {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw CodedError(ErrorCode::kInvalidArgument, "run(method, args): method must be a string");
    }
    method = info[0].As<Napi::String>().Utf8Value();
    if (info.Length() > 1 && info[1].IsArray()) {
      Napi::Array array = info[1].As<Napi::Array>();
      for (uint32_t i = 0; i < array.Length(); ++i) args.push_back(FromJs(array.Get(i)));
    }
  } catch (const Napi::Error& e) {
    return Rejected(env, {ErrorCode::kInvalidArgument, e.Message()});
  } catch (...) {
    return Rejected(env, CurrentError(ErrorCode::kInvalidArgument));
  }

  auto deferred = Napi::Promise::Deferred::New(env);
  auto core = core_;
  auto mailbox = mailbox_;
  TorchModel* self = this;  // kept alive by Hold() until the letter settles
  auto settle = [self, mailbox, deferred](HostValue out, bool failed, ErrorInfo error) {
    mailbox->Post([self, deferred, out = std::move(out), failed, error](Napi::Env env) {
      if (failed) {
        deferred.Reject(MakeError(env, error).Value());
      } else {
        deferred.Resolve(ToJs(env, out));
      }
      self->Settle(env);
    });
  };
  auto run = [core, method, args, settle] {
    try {
      if (!core->loaded().module) {
        throw CodedError(ErrorCode::kInvalidArgument, "the model serves generation from its archive's records, with no "
                                                      "TorchScript module to call `" + method + "` on (loaded with deferModule)");
      }
      auto function = core->loaded().module->find_method(method);
      if (!function) throw CodedError(ErrorCode::kInvalidArgument, "the module has no method `" + method + "`");
      const auto& schema = function->function().getSchema();
      std::vector<c10::IValue> stack;
      for (size_t i = 0; i < args.size(); ++i) {
        c10::TypePtr expected = i + 1 < schema.arguments().size() ? schema.arguments()[i + 1].type() : nullptr;
        stack.push_back(ToIValue(args[i], expected, core->loaded().device));
      }
      settle(FromIValue((*function)(std::move(stack))), false, {});
    } catch (...) {
      ErrorInfo error = CurrentError(ErrorCode::kInference);
      if (core->WeightsReleased()) {
        error.message += " (the module's parameters were released once the native runtime packed its own copy)";
      }
      settle({}, true, error);
    }
  };
  auto abandon = [settle] { settle({}, true, {ErrorCode::kDisposed, "the model was disposed"}); };
  if (!Submit(env, {run, abandon, nullptr})) return Rejected(env, {ErrorCode::kDisposed, "the model was disposed"});
  return deferred.Promise();
#endif
}

Napi::Value TorchModel::Generate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object handle = Napi::Object::New(env);
  std::vector<GenerateRow> rows;
  try {
    if (!languageModel_) throw CodedError(ErrorCode::kInvalidArgument, "generate() needs a model loaded with loadLanguageModel()");
    rows = ParseRows(info.Length() > 0 ? info[0] : env.Undefined());
  } catch (...) {
    handle.Set("result", Rejected(env, CurrentError(ErrorCode::kInvalidArgument)));
    handle.Set("cancel", Napi::Function::New(env, [](const Napi::CallbackInfo&) {}));
    handle.Set("setMask", Napi::Function::New(env, [](const Napi::CallbackInfo&) {}));
    return handle;
  }

  auto job = std::make_shared<Generation>(std::move(rows));
  auto* js = new GenerationJs{Napi::Promise::Deferred::New(env), Napi::FunctionReference()};
  const bool streaming = info.Length() > 1 && info[1].IsFunction();
  if (streaming) js->onTokens = Napi::Persistent(info[1].As<Napi::Function>());
  handle.Set("result", js->deferred.Promise());
  // Read once `result` has settled (the completion letter orders the inference thread's writes).
  handle.Set("cachedTokens", Napi::Function::New(env, [job](const Napi::CallbackInfo& call) {
    Napi::Array out = Napi::Array::New(call.Env(), job->cachedTokens.size());
    for (size_t r = 0; r < job->cachedTokens.size(); ++r) {
      out.Set(r, Napi::Number::New(call.Env(), static_cast<double>(job->cachedTokens[r])));
    }
    return out;
  }));
  handle.Set("cancel", Napi::Function::New(env, [job](const Napi::CallbackInfo& call) {
    job->Cancel(call.Length() > 0 && call[0].IsNumber() ? call[0].As<Napi::Number>().Int64Value() : -1);
  }));
  // A constrained row's mask for its next token (src/engine/constraints); ignored for a row
  // out of range or not constrained.
  handle.Set("setMask", Napi::Function::New(env, [job](const Napi::CallbackInfo& call) {
    if (call.Length() < 2 || !call[0].IsNumber() || !call[1].IsTypedArray()) return;
    const int64_t row = call[0].As<Napi::Number>().Int64Value();
    Napi::TypedArray array = call[1].As<Napi::TypedArray>();
    if (array.TypedArrayType() != napi_int32_array || row < 0 || static_cast<size_t>(row) >= job->size() ||
        !job->rows()[row].constrained) {
      return;
    }
    Napi::Int32Array words = array.As<Napi::Int32Array>();
    job->SetMask(static_cast<size_t>(row), std::vector<int32_t>(words.Data(), words.Data() + words.ElementLength()));
  }));

  auto core = core_;
  auto mailbox = mailbox_;
  auto deliverTokens = [job, js](Napi::Env env) {
    TokenBatch batch = job->Drain();
    if (batch.pairs.empty() || js->onTokens.IsEmpty()) return;
    if (!job->WantsLogprobs()) {
      js->onTokens.Call({ToInt32Array(env, batch.pairs)});
      return;
    }
    js->onTokens.Call({ToInt32Array(env, batch.pairs), ToFloat32Array(env, batch.logprobs),
                       ToInt32Array(env, batch.topIds), ToFloat32Array(env, batch.topLogprobs)});
  };
  TorchModel* self = this;  // kept alive by Hold() until the completion letter
  auto complete = [self, mailbox, job, js, deliverTokens] {
    mailbox->Post([self, job, js, deliverTokens](Napi::Env env) {
      std::unique_ptr<GenerationJs> owned(js);
      try {
        deliverTokens(env);
      } catch (...) {
        // A throwing token callback must not leave the promise unsettled.
      }
      if (job->failed) {
        owned->deferred.Reject(MakeError(env, job->error).Value());
      } else {
        Napi::Array outputs = Napi::Array::New(env, job->outputs.size());
        for (size_t r = 0; r < job->outputs.size(); ++r) outputs.Set(r, ToInt32Array(env, job->outputs[r]));
        owned->deferred.Resolve(outputs);
      }
      self->Settle(env);
    });
  };
  TokenSink sink;
  if (streaming) {
    sink = [job, mailbox, deliverTokens](size_t row, const SampledToken& token) {
      if (job->Push(row, token)) mailbox->Post(deliverTokens);
    };
  }
  auto scheduled = std::make_shared<ScheduledJob>();
  scheduled->generation = job;
  scheduled->sink = sink;
  scheduled->complete = [core, job, complete] {
    core->Track(job, false);
    complete();
  };
  auto run = [core, scheduled] { core->Serve(scheduled); };
  auto abandon = [job, complete] {
    job->failed = true;
    job->error = {ErrorCode::kDisposed, "the model was disposed before this generation started"};
    complete();
  };
  if (!Submit(env, {run, abandon, scheduled})) {
    job->failed = true;
    job->error = {ErrorCode::kDisposed, "the model was disposed"};
    js->deferred.Reject(MakeError(env, job->error).Value());
    delete js;
  }
  return handle;
}

Napi::Value TorchModel::Configure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DecodeSettings decode;
  RuntimeRequest request;
  int64_t warmupToken = 0;
  try {
    if (!languageModel_) throw CodedError(ErrorCode::kInvalidArgument, "configure() needs a model loaded with loadLanguageModel()");
    if (info.Length() < 1 || !info[0].IsObject()) throw CodedError(ErrorCode::kInvalidArgument, "configure(settings) takes an object");
    Napi::Object settings = info[0].As<Napi::Object>();
    decode = ParseDecodeSettings(settings);
    request = ParseRuntimeRequest(settings, core_->threads());
    warmupToken = IntField(settings, "warmupToken", 0);
  } catch (...) {
    return Rejected(env, CurrentError(ErrorCode::kInvalidArgument));
  }

  auto deferred = Napi::Promise::Deferred::New(env);
  auto core = core_;
  auto mailbox = mailbox_;
  TorchModel* self = this;
  auto settle = [self, mailbox, deferred](bool failed, ErrorInfo error, ConfigureResult result) {
    mailbox->Post([self, deferred, failed, error, result](Napi::Env env) {
      if (failed) {
        deferred.Reject(MakeError(env, error).Value());
      } else {
        Napi::Object out = Napi::Object::New(env);
        out.Set("runtime", result.runtime);
        if (!result.kernels.empty()) out.Set("kernels", result.kernels);
        if (!result.note.empty()) out.Set("note", result.note);
        out.Set("kvBytesPerRow", Napi::Number::New(env, static_cast<double>(result.kvBytesPerRow)));
        Napi::Object phases = Napi::Object::New(env);
        for (const auto& [name, seconds] : result.phases) phases.Set(name, Napi::Number::New(env, seconds));
        out.Set("phases", phases);
        deferred.Resolve(out);
      }
      self->Settle(env);
    });
  };
  auto run = [core, decode, warmupToken, request, settle] {
    try {
      settle(false, {}, core->Configure(request, decode, warmupToken));
    } catch (...) {
      settle(true, CurrentError(ErrorCode::kCheckpointInterface), {});
    }
  };
  auto abandon = [settle] { settle(true, {ErrorCode::kDisposed, "the model was disposed"}, {}); };
  if (!Submit(env, {run, abandon, nullptr})) return Rejected(env, {ErrorCode::kDisposed, "the model was disposed"});
  return deferred.Promise();
}

Napi::Value TorchModel::Dispose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto deferred = Napi::Promise::Deferred::New(env);
  if (disposed_) {
    deferred.Resolve(env.Undefined());
    return deferred.Promise();
  }
  disposeWaiters_.push_back(deferred);
  if (disposing_) return deferred.Promise();
  disposing_ = true;

  // Work already submitted (running or queued) finishes; later calls reject ERR_DISPOSED.
  // The thread's last act posts the exit letter, after every other letter of this model.
  Hold(env);
  auto core = core_;
  auto mailbox = mailbox_;
  TorchModel* self = this;
  core_->thread().RequestStop([core, mailbox, self] {
    mailbox->Post([core, mailbox, self](Napi::Env env) {
      core->Release();
      self->disposed_ = true;
      auto waiters = std::move(self->disposeWaiters_);
      self->Settle(env);
      mailbox->Close(nullptr);
      for (auto& waiter : waiters) waiter.Resolve(env.Undefined());
    });
  });
  return deferred.Promise();
}

Napi::Value TorchModel::WeightBytes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto deferred = Napi::Promise::Deferred::New(env);
  auto core = core_;
  auto mailbox = mailbox_;
  TorchModel* self = this;
  auto settle = [self, mailbox, deferred](bool failed, ErrorInfo error, std::pair<int64_t, int64_t> bytes) {
    mailbox->Post([self, deferred, failed, error, bytes](Napi::Env env) {
      if (failed) {
        deferred.Reject(MakeError(env, error).Value());
      } else {
        Napi::Object out = Napi::Object::New(env);
        out.Set("module", Napi::Number::New(env, static_cast<double>(bytes.first)));
        out.Set("runtime", Napi::Number::New(env, static_cast<double>(bytes.second)));
        deferred.Resolve(out);
      }
      self->Settle(env);
    });
  };
  // On the inference thread: configure() changes what is held.
  auto run = [core, settle] {
    try {
      settle(false, {}, core->WeightBytes());
    } catch (...) {
      settle(true, CurrentError(ErrorCode::kInference), {});
    }
  };
  auto abandon = [settle] { settle(true, {ErrorCode::kDisposed, "the model was disposed"}, {}); };
  if (!Submit(env, {run, abandon, nullptr})) return Rejected(env, {ErrorCode::kDisposed, "the model was disposed"});
  return deferred.Promise();
}

namespace {

// Waits for a layout file's write on a worker thread of libuv's pool.
class LayoutWaitWorker final : public Napi::AsyncWorker {
 public:
  LayoutWaitWorker(Napi::Env env, LayoutWrite write)
      : Napi::AsyncWorker(env, "torchserve-node:layout"), deferred_(Napi::Promise::Deferred::New(env)), write_(std::move(write)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override { error_ = write_.done.get(); }
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object out = Napi::Object::New(env);
    out.Set("file", write_.file);
    out.Set("bytes", Napi::Number::New(env, static_cast<double>(write_.bytes)));
    out.Set("error", error_);
    out.Set("adopted", Napi::Boolean::New(env, write_.adopted && write_.adopted->load()));
    deferred_.Resolve(out);
  }

 private:
  Napi::Promise::Deferred deferred_;
  LayoutWrite write_;
  std::string error_;
};

}  // namespace

Napi::Value TorchModel::LayoutWritten(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::optional<LayoutWrite> write = core_->LayoutWritten();
  if (!write) {
    auto deferred = Napi::Promise::Deferred::New(env);
    deferred.Resolve(env.Null());
    return deferred.Promise();
  }
  auto* worker = new LayoutWaitWorker(env, std::move(*write));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value TorchModel::ExtraFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object files = Napi::Object::New(env);
  for (const auto& [name, content] : core_->loaded().extraFiles) files.Set(name, content);
  return files;
}

Napi::Value TorchModel::Device(const Napi::CallbackInfo& info) {
#if TSN_NATIVE_ONLY
  return Napi::String::New(info.Env(), "cpu");  // the only device of this build
#else
  return Napi::String::New(info.Env(), core_->loaded().device.str());
#endif
}

Napi::Value TorchModel::PrefixCacheStats(const Napi::CallbackInfo& info) {
  const tsn::PrefixCacheStats stats = core_->PrefixStats();
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("queriedTokens", Napi::Number::New(info.Env(), static_cast<double>(stats.queriedTokens)));
  out.Set("hitTokens", Napi::Number::New(info.Env(), static_cast<double>(stats.hitTokens)));
  out.Set("evictions", Napi::Number::New(info.Env(), static_cast<double>(stats.evictions)));
  return out;
}

}  // namespace tsn
