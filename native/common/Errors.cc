#include "common/Errors.h"

#if !TSN_NATIVE_ONLY
#include <c10/util/Exception.h>
#endif

namespace tsn {

ErrorInfo CurrentError(const char* fallbackCode) {
  try {
    throw;
  } catch (const CodedError& e) {
    return {e.code(), e.what()};
#if !TSN_NATIVE_ONLY
  } catch (const c10::Error& e) {
    return {fallbackCode, e.what_without_backtrace()};
#endif
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
