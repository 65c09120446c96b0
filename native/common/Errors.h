// Errors that cross into JavaScript carry a `code` from src/errors.ts.
#pragma once

#include <napi.h>

#include <stdexcept>
#include <string>

namespace tsn {

// A failure whose code the caller chose (ERR_DEVICE, ERR_CHECKPOINT_INVALID, ...).
class CodedError : public std::runtime_error {
 public:
  CodedError(std::string code, const std::string& message)
      : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

struct ErrorInfo {
  std::string code;
  std::string message;
};

// Call only inside a catch block: names the exception in flight. c10::Error messages are
// taken without their C++ backtrace; anything else gets `fallbackCode`.
ErrorInfo CurrentError(const char* fallbackCode);

Napi::Error MakeError(Napi::Env env, const ErrorInfo& info);

}  // namespace tsn
