#include "binding/HostValue.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>

#include "common/ErrorCodes.h"
#include "common/Errors.h"

namespace tsn {

namespace {

HostValue TensorFromTypedArray(const Napi::TypedArray& array, const Napi::Array& shape) {
  HostValue out;
  out.kind = HostValue::Kind::Tensor;
  switch (array.TypedArrayType()) {
    case napi_float32_array: out.dtype = c10::ScalarType::Float; break;
    case napi_float64_array: out.dtype = c10::ScalarType::Double; break;
    case napi_int32_array: out.dtype = c10::ScalarType::Int; break;
    case napi_bigint64_array: out.dtype = c10::ScalarType::Long; break;
    case napi_uint8_array: out.dtype = c10::ScalarType::Bool; break;
    default:
      throw Napi::TypeError::New(array.Env(),
                                 "tensor data must be a Float32Array, Float64Array, Int32Array, "
                                 "BigInt64Array or Uint8Array (bool)");
  }
  int64_t count = 1;
  for (uint32_t i = 0; i < shape.Length(); ++i) {
    const int64_t dim = shape.Get(i).As<Napi::Number>().Int64Value();
    if (dim < 0) throw Napi::TypeError::New(array.Env(), "tensor shape has a negative size");
    out.shape.push_back(dim);
    count *= dim;
  }
  if (count != static_cast<int64_t>(array.ElementLength())) {
    throw Napi::TypeError::New(array.Env(), "tensor shape does not match its data length");
  }
  const auto* begin = static_cast<const uint8_t*>(array.ArrayBuffer().Data()) + array.ByteOffset();
  out.bytes.assign(begin, begin + array.ByteLength());
  return out;
}

const char* DtypeName(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Bool: return "bool";
    default: return "unsupported";
  }
}

}  // namespace

HostValue FromJs(const Napi::Value& value) {
  HostValue out;
  if (value.IsNull() || value.IsUndefined()) return out;
  if (value.IsBoolean()) {
    out.kind = HostValue::Kind::Bool;
    out.flag = value.As<Napi::Boolean>().Value();
    return out;
  }
  if (value.IsNumber()) {
    out.kind = HostValue::Kind::Number;
    out.number = value.As<Napi::Number>().DoubleValue();
    out.integral = std::isfinite(out.number) && std::floor(out.number) == out.number;
    return out;
  }
  if (value.IsArray()) {
    Napi::Array array = value.As<Napi::Array>();
    out.kind = HostValue::Kind::List;
    for (uint32_t i = 0; i < array.Length(); ++i) out.items.push_back(FromJs(array.Get(i)));
    return out;
  }
  if (value.IsObject()) {
    Napi::Object object = value.As<Napi::Object>();
    Napi::Value data = object.Get("data");
    Napi::Value shape = object.Get("shape");
    if (data.IsTypedArray() && shape.IsArray()) {
      return TensorFromTypedArray(data.As<Napi::TypedArray>(), shape.As<Napi::Array>());
    }
  }
  throw Napi::TypeError::New(value.Env(),
                             "argument must be a number, boolean, array or {dtype, shape, data}");
}

Napi::Value ToJs(Napi::Env env, const HostValue& value) {
  switch (value.kind) {
    case HostValue::Kind::None: return env.Null();
    case HostValue::Kind::Bool: return Napi::Boolean::New(env, value.flag);
    case HostValue::Kind::Number: return Napi::Number::New(env, value.number);
    case HostValue::Kind::List: {
      Napi::Array array = Napi::Array::New(env, value.items.size());
      for (size_t i = 0; i < value.items.size(); ++i) array.Set(i, ToJs(env, value.items[i]));
      return array;
    }
    case HostValue::Kind::Tensor: {
      Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, value.bytes.size());
      if (!value.bytes.empty()) std::memcpy(buffer.Data(), value.bytes.data(), value.bytes.size());
      Napi::Value data;
      switch (value.dtype) {
        case c10::ScalarType::Float:
          data = Napi::Float32Array::New(env, value.bytes.size() / 4, buffer, 0);
          break;
        case c10::ScalarType::Double:
          data = Napi::Float64Array::New(env, value.bytes.size() / 8, buffer, 0);
          break;
        case c10::ScalarType::Int:
          data = Napi::Int32Array::New(env, value.bytes.size() / 4, buffer, 0);
          break;
        case c10::ScalarType::Long:
          data = Napi::TypedArrayOf<int64_t>::New(env, value.bytes.size() / 8, buffer, 0,
                                                  napi_bigint64_array);
          break;
        default:
          data = Napi::Uint8Array::New(env, value.bytes.size(), buffer, 0);
          break;
      }
      Napi::Array shape = Napi::Array::New(env, value.shape.size());
      for (size_t i = 0; i < value.shape.size(); ++i) {
        shape.Set(i, Napi::Number::New(env, static_cast<double>(value.shape[i])));
      }
      Napi::Object tensor = Napi::Object::New(env);
      tensor.Set("dtype", DtypeName(value.dtype));
      tensor.Set("shape", shape);
      tensor.Set("data", data);
      return tensor;
    }
  }
  return env.Null();
}

c10::IValue ToIValue(const HostValue& value, const c10::TypePtr& expected, c10::Device device) {
  switch (value.kind) {
    case HostValue::Kind::None: return c10::IValue();
    case HostValue::Kind::Bool: return c10::IValue(value.flag);
    case HostValue::Kind::Number: {
      const bool wantsFloat = expected && expected->kind() == c10::TypeKind::FloatType;
      if (value.integral && !wantsFloat) return c10::IValue(static_cast<int64_t>(value.number));
      return c10::IValue(value.number);
    }
    case HostValue::Kind::List: {
      c10::TypePtr element;
      if (expected && expected->kind() == c10::TypeKind::ListType) {
        element = expected->expectRef<c10::ListType>().getElementType();
      }
      if (element && element->kind() == c10::TypeKind::IntType) {
        c10::List<int64_t> list;
        for (const auto& item : value.items) list.push_back(static_cast<int64_t>(item.number));
        return c10::IValue(list);
      }
      if (element && element->kind() == c10::TypeKind::FloatType) {
        c10::List<double> list;
        for (const auto& item : value.items) list.push_back(item.number);
        return c10::IValue(list);
      }
      c10::List<at::Tensor> list;
      for (const auto& item : value.items) {
        list.push_back(ToIValue(item, nullptr, device).toTensor());
      }
      return c10::IValue(list);
    }
    case HostValue::Kind::Tensor: {
      at::Tensor tensor = at::empty(value.shape, at::TensorOptions().dtype(value.dtype));
      if (!value.bytes.empty()) std::memcpy(tensor.data_ptr(), value.bytes.data(), value.bytes.size());
      return c10::IValue(device.is_cpu() ? tensor : tensor.to(device));
    }
  }
  return c10::IValue();
}

HostValue FromIValue(const c10::IValue& value) {
  HostValue out;
  if (value.isNone()) return out;
  if (value.isBool()) {
    out.kind = HostValue::Kind::Bool;
    out.flag = value.toBool();
  } else if (value.isInt()) {
    out.kind = HostValue::Kind::Number;
    out.number = static_cast<double>(value.toInt());
    out.integral = true;
  } else if (value.isDouble()) {
    out.kind = HostValue::Kind::Number;
    out.number = value.toDouble();
  } else if (value.isTensor()) {
    at::Tensor tensor = value.toTensor().detach().to(at::kCPU).contiguous();
    const auto dtype = tensor.scalar_type();
    if (dtype != c10::ScalarType::Float && dtype != c10::ScalarType::Double &&
        dtype != c10::ScalarType::Int && dtype != c10::ScalarType::Long &&
        dtype != c10::ScalarType::Bool) {
      tensor = tensor.to(at::is_floating_point(tensor) ? at::kFloat : at::kLong);
    }
    out.kind = HostValue::Kind::Tensor;
    out.dtype = tensor.scalar_type();
    out.shape = tensor.sizes().vec();
    const auto* begin = static_cast<const uint8_t*>(tensor.data_ptr());
    out.bytes.assign(begin, begin + tensor.numel() * tensor.element_size());
  } else if (value.isTuple() || value.isList()) {
    out.kind = HostValue::Kind::List;
    const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toListRef().vec();
    for (const auto& element : elements) out.items.push_back(FromIValue(element));
  } else {
    throw CodedError(ErrorCode::kInference, "method returned a value of type " +
                                          value.type()->str() +
                                          ", which cannot cross to JavaScript");
  }
  return out;
}

}  // namespace tsn
