#include "binding/JsArgs.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "common/ErrorCodes.h"
#include "common/Errors.h"
#include "kernels/Kernels.h"

namespace tsn {

namespace {

std::string TextField(const Napi::Object& object, const char* name, const std::string& fallback) {
  Napi::Value value = object.Get(name);
  return value.IsString() ? value.As<Napi::String>().Utf8Value() : fallback;
}

// A text setting that must be one of `choices` (the first is its default when absent), or a
// caller's error naming the setting, the choices and the value given.
std::string ChoiceField(const Napi::Object& object, const char* name, std::initializer_list<const char*> choices) {
  const std::string value = TextField(object, name, *choices.begin());
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
  std::string message = std::string(name) + " must be ";
  size_t i = 0;
  for (const char* choice : choices) {
    message += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string("\"") + choice + "\"";
    ++i;
  }
  throw CodedError(ErrorCode::kInvalidArgument, message + ", got \"" + value + "\"");
}

c10::ScalarType ParseDtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw CodedError(ErrorCode::kInvalidArgument,
                   "dtype must be \"float32\", \"bfloat16\" or \"float16\", got \"" + name + "\"");
}

// config.json's scalars; nested objects (rope_scaling) one level down, as "outer.inner".
void AddFields(const Napi::Object& object, const std::string& prefix, int depth, ModelFields& fields) {
  Napi::Array names = object.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); ++i) {
    const std::string name = names.Get(i).As<Napi::String>().Utf8Value();
    Napi::Value value = object.Get(name);
    if (value.IsNumber()) {
      fields.numbers[prefix + name] = value.As<Napi::Number>().DoubleValue();
    } else if (value.IsBoolean()) {
      fields.numbers[prefix + name] = value.As<Napi::Boolean>().Value() ? 1.0 : 0.0;
    } else if (value.IsString()) {
      fields.strings[prefix + name] = value.As<Napi::String>().Utf8Value();
    } else if (value.IsObject() && !value.IsArray() && depth < 1) {
      AddFields(value.As<Napi::Object>(), prefix + name + ".", depth + 1, fields);
    }
  }
}

}  // namespace

int64_t IntField(const Napi::Object& object, const char* name, int64_t fallback) {
  Napi::Value value = object.Get(name);
  return value.IsNumber() ? value.As<Napi::Number>().Int64Value() : fallback;
}

SamplingSettings ParseSamplingSettings(const Napi::Object& object) {
  auto number = [&](const char* name, double fallback) {
    Napi::Value value = object.Get(name);
    return value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : fallback;
  };
  SamplingSettings s;
  s.temperature = number("temperature", s.temperature);
  s.topK = IntField(object, "topK", s.topK);
  s.topP = number("topP", s.topP);
  s.minP = number("minP", s.minP);
  s.presencePenalty = number("presencePenalty", s.presencePenalty);
  s.frequencyPenalty = number("frequencyPenalty", s.frequencyPenalty);
  s.repetitionPenalty = number("repetitionPenalty", s.repetitionPenalty);
  s.seed = IntField(object, "seed", s.seed);
  s.logprobs = IntField(object, "logprobs", s.logprobs);
  const bool valid = s.temperature >= 0 && s.topK >= 0 && s.topP > 0 && s.topP <= 1 && s.minP >= 0 && s.minP <= 1 &&
                     std::isfinite(s.presencePenalty) && std::isfinite(s.frequencyPenalty) &&
                     s.repetitionPenalty > 0 && std::isfinite(s.repetitionPenalty);
  if (!valid) {
    throw CodedError(ErrorCode::kInvalidArgument,
                     "sampling needs temperature >= 0, topK >= 0, 0 < topP <= 1, 0 <= minP <= 1, finite penalties "
                     "and repetitionPenalty > 0");
  }
  return s;
}

std::vector<GenerateRow> ParseRows(const Napi::Value& value) {
  if (!value.IsArray() || value.As<Napi::Array>().Length() == 0) {
    throw CodedError(ErrorCode::kInvalidArgument, "generate() takes a non-empty array of rows");
  }
  Napi::Array array = value.As<Napi::Array>();
  std::vector<GenerateRow> rows;
  for (uint32_t i = 0; i < array.Length(); ++i) {
    Napi::Value item = array.Get(i);
    if (!item.IsObject()) throw CodedError(ErrorCode::kInvalidArgument, "each row must be an object");
    Napi::Object row = item.As<Napi::Object>();
    Napi::Value tokens = row.Get("tokens");
    if (!tokens.IsTypedArray() || tokens.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      throw CodedError(ErrorCode::kInvalidArgument, "row.tokens must be an Int32Array");
    }
    Napi::Int32Array ids = tokens.As<Napi::Int32Array>();
    GenerateRow parsed;
    parsed.prompt.assign(ids.Data(), ids.Data() + ids.ElementLength());
    parsed.maxNewTokens = IntField(row, "maxNewTokens", 1);
    if (parsed.prompt.empty() || parsed.maxNewTokens < 1) {
      throw CodedError(ErrorCode::kInvalidArgument, "row needs tokens (non-empty) and maxNewTokens >= 1");
    }
    // The settings object (src/native/types.ts RawGenerateRow.sampling); the older flat
    // form kept them on the row itself.
    Napi::Value sampling = row.Get("sampling");
    parsed.sampling = ParseSamplingSettings(sampling.IsObject() ? sampling.As<Napi::Object>() : row);
    parsed.sharesPrefillWith = IntField(row, "sharesPrefillWith", -1);
    if (parsed.sharesPrefillWith >= static_cast<int64_t>(i)) {
      throw CodedError(ErrorCode::kInvalidArgument, "row.sharesPrefillWith must name an earlier row");
    }
    Napi::Value mask = row.Get("mask");
    if (!mask.IsUndefined() && !mask.IsNull()) {
      if (!mask.IsTypedArray() || mask.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
        throw CodedError(ErrorCode::kInvalidArgument, "row.mask must be an Int32Array");
      }
      Napi::Int32Array words = mask.As<Napi::Int32Array>();
      parsed.constrained = true;
      parsed.mask.assign(words.Data(), words.Data() + words.ElementLength());
    }
    rows.push_back(std::move(parsed));
  }
  return rows;
}

DecodeSettings ParseDecodeSettings(const Napi::Object& settings) {
  DecodeSettings decode;
  decode.contextLength = IntField(settings, "contextLength", 0);
  if (decode.contextLength < 2) {
    throw CodedError(ErrorCode::kInvalidArgument, "configure(): contextLength must be at least 2");
  }
  Napi::Value list = settings.Get("eosTokenIds");
  if (list.IsArray()) {
    Napi::Array ids = list.As<Napi::Array>();
    for (uint32_t i = 0; i < ids.Length(); ++i) {
      Napi::Value id = ids.Get(i);
      if (!id.IsNumber() || id.As<Napi::Number>().Int64Value() < 0) {
        throw CodedError(ErrorCode::kInvalidArgument, "configure(): eosTokenIds must hold token ids >= 0");
      }
      decode.eosTokenIds.push_back(id.As<Napi::Number>().Int64Value());
    }
  }
  decode.stepTokens = IntField(settings, "stepTokens", DecodeSettings::kDefaultStepTokens);
  if (decode.stepTokens < 0) {
    throw CodedError(ErrorCode::kInvalidArgument, "configure(): stepTokens must be >= 0 (0: unchunked prefill)");
  }
  decode.prefillPerDecode = IntField(settings, "prefillPerDecode", DecodeSettings::kDefaultPrefillPerDecode);
  Napi::Value prefix = settings.Get("prefixCache");
  if (!prefix.IsUndefined() && !prefix.IsBoolean()) {
    throw CodedError(ErrorCode::kInvalidArgument, "configure(): prefixCache must be a boolean");
  }
  decode.prefixCache = !prefix.IsBoolean() || prefix.As<Napi::Boolean>().Value();
  return decode;
}

RuntimeRequest ParseRuntimeRequest(const Napi::Object& settings, int threads) {
  RuntimeRequest request;
  request.runtime = ChoiceField(settings, "runtime", {"auto", "native", "torchscript"});
  request.architecture = TextField(settings, "architecture", "");
  request.kernels = TextField(settings, "kernels", "auto");
  SelectKernels(request.kernels);  // an unknown family is the caller's mistake, not a fallback
  request.dtype = ParseDtype(TextField(settings, "dtype", "float32"));
  request.scriptCompute = ChoiceField(settings, "torchscriptCompute", {"auto", "checkpoint", "float32"});
  request.scriptDequantize = ChoiceField(settings, "torchscriptDequantize", {"auto", "once", "every-call"});
  request.scriptOptimize = ChoiceField(settings, "torchscriptOptimize", {"auto", "on", "off"});
  const int64_t budgetMb = IntField(settings, "kvBudgetMb", 0);
  if (budgetMb < 0) throw CodedError(ErrorCode::kInvalidArgument, "configure(): kvBudgetMb must be >= 0 (0: default)");
  request.kvBudgetBytes = budgetMb << 20;
  Napi::Value release = settings.Get("releaseModuleWeights");
  if (!release.IsUndefined() && !release.IsBoolean()) {
    throw CodedError(ErrorCode::kInvalidArgument, "configure(): releaseModuleWeights must be a boolean");
  }
  request.releaseModuleWeights = release.IsBoolean() && release.As<Napi::Boolean>().Value();
  Napi::Value fields = settings.Get("modelConfig");
  if (fields.IsObject()) AddFields(fields.As<Napi::Object>(), "", 0, request.fields);
  request.threads = std::max(1, threads);
  request.checkCacheDir = TextField(settings, "loadCheckCache", "");
  request.forceCheck = ChoiceField(settings, "loadCheck", {"cached", "always"}) == "always";
  return request;
}

}  // namespace tsn
