// Arguments of TorchModel's JavaScript methods, copied into plain C++ values on the JS
// thread (the inference thread never touches a Napi::Value). Each parser throws CodedError
// (ERR_INVALID_ARGUMENT) naming what is wrong.
#pragma once

#include <napi.h>

#include <cstdint>
#include <vector>

#include "runtime/Generation.h"
#include "runtime/Runtime.h"
#include "runtime/Scheduler.h"

namespace tsn {

// generate(rows): a non-empty array of {tokens: Int32Array, maxNewTokens, sampling,
// sharesPrefillWith?}.
std::vector<GenerateRow> ParseRows(const Napi::Value& value);
// The one reader of a row's sampling settings (src/native/types.ts RawSamplingSettings).
SamplingSettings ParseSamplingSettings(const Napi::Object& object);

// configure(settings): what the decode loop needs ...
DecodeSettings ParseDecodeSettings(const Napi::Object& settings);
// ... and which runtime serves the model (src/native/types.ts RawLanguageModelSettings).
RuntimeRequest ParseRuntimeRequest(const Napi::Object& settings, int threads);

int64_t IntField(const Napi::Object& object, const char* name, int64_t fallback);

}  // namespace tsn
