// Values crossing between JavaScript and the inference thread. The JS side copies into a
// HostValue on the JS thread; the inference thread turns it into an IValue (and back) and
// never touches a Napi::Value.
#pragma once

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <napi.h>

#include <cstdint>
#include <vector>

namespace tsn {

struct HostValue {
  enum class Kind { None, Tensor, Number, Bool, List };
  Kind kind = Kind::None;

  // Tensor
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  // Number (integral tells whether it can be an int argument) and Bool
  double number = 0;
  bool integral = false;
  bool flag = false;

  std::vector<HostValue> items;
};

// JS thread. Throws Napi::TypeError for values that cannot cross.
HostValue FromJs(const Napi::Value& value);
Napi::Value ToJs(Napi::Env env, const HostValue& value);

// Inference thread. `expected` (from the method schema) decides int vs float for numbers.
c10::IValue ToIValue(const HostValue& value, const c10::TypePtr& expected, c10::Device device);
HostValue FromIValue(const c10::IValue& value);

}  // namespace tsn
