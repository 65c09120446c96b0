#include "common/Errors.h"

#include <c10/util/Exception.h>

namespace tsn {

ErrorInfo CurrentError(const char* fallbackCode) {
  try {
    throw;
  } catch (const CodedError& e) {
    return {e.code(), e.what()};
  } catch (const c10::Error& e) {
    return {fallbackCode, e.what_without_backtrace()};
  } catch (const std::exception& e) {
    return {fallbackCode, e.what()};
  } catch (...) {
    return {fallbackCode, "unknown native error"};
  }
}

Napi::Error MakeError(Napi::Env env, const ErrorInfo& info) {
  Napi::Error error = Napi::Error::New(env, info.message);
  error.Set("code", Napi::String::New(env, info.code));
  return error;
}

}  // namespace tsn
