#include "TorchModel.h"

#include <cstring>

#include "AddonData.h"
#include "HostValue.h"
#include "Runtime.h"

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

int64_t IntField(const Napi::Object& object, const char* name, int64_t fallback) {
  Napi::Value value = object.Get(name);
  return value.IsNumber() ? value.As<Napi::Number>().Int64Value() : fallback;
}

std::vector<GenerateRow> ParseRows(const Napi::Value& value) {
  if (!value.IsArray() || value.As<Napi::Array>().Length() == 0) {
    throw CodedError("ERR_INVALID_ARGUMENT", "generate() takes a non-empty array of rows");
  }
  Napi::Array array = value.As<Napi::Array>();
  std::vector<GenerateRow> rows;
  for (uint32_t i = 0; i < array.Length(); ++i) {
    Napi::Value item = array.Get(i);
    if (!item.IsObject()) throw CodedError("ERR_INVALID_ARGUMENT", "each row must be an object");
    Napi::Object row = item.As<Napi::Object>();
    Napi::Value tokens = row.Get("tokens");
    if (!tokens.IsTypedArray() || tokens.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw CodedError("ERR_INVALID_ARGUMENT", "row.tokens must be an Int32Array");
    }
    Napi::Int32Array ids = tokens.As<Napi::Int32Array>();
    GenerateRow parsed;
    parsed.prompt.assign(ids.Data(), ids.Data() + ids.ElementLength());
    parsed.maxNewTokens = IntField(row, "maxNewTokens", 1);
    Napi::Value temperature = row.Get("temperature");
    parsed.temperature = temperature.IsNumber() ? temperature.As<Napi::Number>().DoubleValue() : 1.0;
    parsed.topK = IntField(row, "topK", 0);
    parsed.seed = IntField(row, "seed", -1);
    if (parsed.prompt.empty() || parsed.maxNewTokens < 1 || !(parsed.temperature >= 0) ||
        parsed.topK < 0) {
      throw CodedError("ERR_INVALID_ARGUMENT",
                       "row needs tokens (non-empty), maxNewTokens >= 1, temperature >= 0, topK >= 0");
    }
    rows.push_back(std::move(parsed));
  }
  return rows;
}

void Track(ModelCore& core, const std::shared_ptr<Generation>& job, bool running) {
  std::lock_guard<std::mutex> lock(core.jobsMutex);
  if (running) {
    core.jobs.insert(job);
  } else {
    core.jobs.erase(job);
  }
}

// On the inference thread: serves `first` and the generation jobs queued behind it (they
// join its decode loop where the runtime allows).
void ServeJobs(const std::shared_ptr<ModelCore>& core, const std::shared_ptr<ScheduledJob>& first) {
  Track(*core, first->generation, true);
  if (!core->stepper) {
    first->generation->failed = true;
    first->generation->error = {"ERR_INVALID_ARGUMENT", "configure() the model before generate()"};
    first->complete();
    return;
  }
  Scheduler(*core->stepper, core->decode).Serve(first, [core] {
    auto next = std::static_pointer_cast<ScheduledJob>(core->thread->TakeBatchable());
    if (next) Track(*core, next->generation, true);
    return next;
  });
}

}  // namespace

Napi::Function TorchModel::Define(Napi::Env env) {
  return DefineClass(env, "TorchModel",
                     {
                         InstanceMethod<&TorchModel::Run>("run"),
                         InstanceMethod<&TorchModel::Generate>("generate"),
                         InstanceMethod<&TorchModel::Configure>("configure"),
                         InstanceMethod<&TorchModel::Dispose>("dispose"),
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
  core_ = std::make_shared<ModelCore>();
  core_->loaded = std::move(pending->loaded);
  core_->threads = pending->threads;
  core_->thread = std::make_unique<InferenceThread>(core_->loaded.device, pending->threads);
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
  if (!core_ || !core_->thread) return;
  {
    std::lock_guard<std::mutex> lock(core_->jobsMutex);
    for (const auto& job : core_->jobs) job->Cancel(-1);
  }
  core_->thread->StopAndJoin();
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
  if (!core_->thread->Post(std::move(task))) {
    Settle(env);
    return false;
  }
  return true;
}

Napi::Value TorchModel::Run(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string method;
  std::vector<HostValue> args;
  try {
    if (info.Length() < 1 || !info[0].IsString()) {
      throw CodedError("ERR_INVALID_ARGUMENT", "run(method, args): method must be a string");
    }
    method = info[0].As<Napi::String>().Utf8Value();
    if (info.Length() > 1 && info[1].IsArray()) {
      Napi::Array array = info[1].As<Napi::Array>();
      for (uint32_t i = 0; i < array.Length(); ++i) args.push_back(FromJs(array.Get(i)));
    }
  } catch (const Napi::Error& e) {
    return Rejected(env, {"ERR_INVALID_ARGUMENT", e.Message()});
  } catch (...) {
    return Rejected(env, CurrentError("ERR_INVALID_ARGUMENT"));
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
      auto function = core->loaded.module->find_method(method);
      if (!function) throw CodedError("ERR_INVALID_ARGUMENT", "the module has no method `" + method + "`");
      const auto& schema = function->function().getSchema();
      std::vector<c10::IValue> stack;
      for (size_t i = 0; i < args.size(); ++i) {
        c10::TypePtr expected = i + 1 < schema.arguments().size() ? schema.arguments()[i + 1].type() : nullptr;
        stack.push_back(ToIValue(args[i], expected, core->loaded.device));
      }
      settle(FromIValue((*function)(std::move(stack))), false, {});
    } catch (...) {
      settle({}, true, CurrentError("ERR_INFERENCE"));
    }
  };
  auto abandon = [settle] { settle({}, true, {"ERR_DISPOSED", "the model was disposed"}); };
  if (!Submit(env, {run, abandon, nullptr})) return Rejected(env, {"ERR_DISPOSED", "the model was disposed"});
  return deferred.Promise();
}

Napi::Value TorchModel::Generate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object handle = Napi::Object::New(env);
  std::vector<GenerateRow> rows;
  try {
    if (!languageModel_) throw CodedError("ERR_INVALID_ARGUMENT", "generate() needs a model loaded with loadLanguageModel()");
    rows = ParseRows(info.Length() > 0 ? info[0] : env.Undefined());
  } catch (...) {
    handle.Set("result", Rejected(env, CurrentError("ERR_INVALID_ARGUMENT")));
    handle.Set("cancel", Napi::Function::New(env, [](const Napi::CallbackInfo&) {}));
    return handle;
  }

  auto job = std::make_shared<Generation>(std::move(rows));
  auto* js = new GenerationJs{Napi::Promise::Deferred::New(env), Napi::FunctionReference()};
  const bool streaming = info.Length() > 1 && info[1].IsFunction();
  if (streaming) js->onTokens = Napi::Persistent(info[1].As<Napi::Function>());
  handle.Set("result", js->deferred.Promise());
  handle.Set("cancel", Napi::Function::New(env, [job](const Napi::CallbackInfo& call) {
    job->Cancel(call.Length() > 0 && call[0].IsNumber() ? call[0].As<Napi::Number>().Int64Value() : -1);
  }));

  auto core = core_;
  auto mailbox = mailbox_;
  auto deliverTokens = [job, js](Napi::Env env) {
    std::vector<int32_t> pairs = job->Drain();
    if (!pairs.empty() && !js->onTokens.IsEmpty()) js->onTokens.Call({ToInt32Array(env, pairs)});
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
    sink = [job, mailbox, deliverTokens](size_t row, int32_t token) {
      if (job->Push(row, token)) mailbox->Post(deliverTokens);
    };
  }
  auto scheduled = std::make_shared<ScheduledJob>();
  scheduled->generation = job;
  scheduled->sink = sink;
  scheduled->complete = [core, job, complete] {
    Track(*core, job, false);
    complete();
  };
  auto run = [core, scheduled] { ServeJobs(core, scheduled); };
  auto abandon = [job, complete] {
    job->failed = true;
    job->error = {"ERR_DISPOSED", "the model was disposed before this generation started"};
    complete();
  };
  if (!Submit(env, {run, abandon, scheduled})) {
    job->failed = true;
    job->error = {"ERR_DISPOSED", "the model was disposed"};
    js->deferred.Reject(MakeError(env, job->error).Value());
    delete js;
  }
  return handle;
}

Napi::Value TorchModel::Configure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!languageModel_) {
    return Rejected(env, {"ERR_INVALID_ARGUMENT", "configure() needs a model loaded with loadLanguageModel()"});
  }
  if (info.Length() < 1 || !info[0].IsObject()) {
    return Rejected(env, {"ERR_INVALID_ARGUMENT", "configure(settings) takes an object"});
  }
  Napi::Object settings = info[0].As<Napi::Object>();
  DecodeSettings decode;
  decode.contextLength = IntField(settings, "contextLength", 0);
  decode.eosTokenId = IntField(settings, "eosTokenId", -1);
  if (decode.contextLength < 2) {
    return Rejected(env, {"ERR_INVALID_ARGUMENT", "configure(): contextLength must be at least 2"});
  }
  const int64_t warmupToken = IntField(settings, "warmupToken", 0);
  RuntimeRequest request;
  auto text = [&](const char* name, const std::string& fallback) {
    Napi::Value value = settings.Get(name);
    return value.IsString() ? value.As<Napi::String>().Utf8Value() : fallback;
  };
  request.runtime = text("runtime", "auto");
  request.architecture = text("architecture", "");
  request.gelu = text("gelu", "tanh");
  request.threads = std::max(1, core_->threads);

  auto deferred = Napi::Promise::Deferred::New(env);
  auto core = core_;
  auto mailbox = mailbox_;
  TorchModel* self = this;
  auto settle = [self, mailbox, deferred](bool failed, ErrorInfo error, std::string runtime, std::string note) {
    mailbox->Post([self, deferred, failed, error, runtime, note](Napi::Env env) {
      if (failed) {
        deferred.Reject(MakeError(env, error).Value());
      } else {
        Napi::Object result = Napi::Object::New(env);
        result.Set("runtime", runtime);
        if (!note.empty()) result.Set("note", note);
        deferred.Resolve(result);
      }
      self->Settle(env);
    });
  };
  auto run = [core, decode, warmupToken, request, settle] {
    try {
      RuntimeChoice choice = ChooseRuntime(core->loaded, request);
      core->stepper = std::move(choice.stepper);
      core->decode = decode;
      core->runtime = choice.runtime;
      // The first calls after load are slow (TorchScript profiling runs): pay them now.
      GenerateRow row;
      row.prompt.assign(8, warmupToken);
      row.maxNewTokens = 3;
      row.temperature = 0;
      for (int i = 0; i < 2; ++i) {
        auto warmup = std::make_shared<ScheduledJob>();
        warmup->generation = std::make_shared<Generation>(std::vector<GenerateRow>{row, row});
        warmup->complete = [] {};
        Scheduler(*core->stepper, core->decode).Serve(warmup, nullptr);
        const Generation& done = *warmup->generation;
        if (done.failed) throw CodedError(done.error.code, done.error.message);
      }
      settle(false, {}, core->runtime, choice.note);
    } catch (...) {
      core->stepper.reset();
      settle(true, CurrentError("ERR_CHECKPOINT_INTERFACE"), "", "");
    }
  };
  auto abandon = [settle] { settle(true, {"ERR_DISPOSED", "the model was disposed"}, "", ""); };
  if (!Submit(env, {run, abandon, nullptr})) return Rejected(env, {"ERR_DISPOSED", "the model was disposed"});
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
  core_->thread->RequestStop([core, mailbox, self] {
    mailbox->Post([core, mailbox, self](Napi::Env env) {
      core->thread->Join();
      core->stepper.reset();
      core->loaded.module.reset();
      self->disposed_ = true;
      auto waiters = std::move(self->disposeWaiters_);
      self->Settle(env);
      mailbox->Close(nullptr);
      for (auto& waiter : waiters) waiter.Resolve(env.Undefined());
    });
  });
  return deferred.Promise();
}

Napi::Value TorchModel::ExtraFiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object files = Napi::Object::New(env);
  for (const auto& [name, content] : core_->loaded.extraFiles) files.Set(name, content);
  return files;
}

Napi::Value TorchModel::Device(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), core_->loaded.device.str());
}

}  // namespace tsn
