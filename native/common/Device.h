// Device names accepted by the addon: "cpu", "cuda", "cuda:N".
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace tsn {

// Parses and checks that this libtorch build and machine can use the device; throws
// CodedError(ErrorCode::kDevice) with the fix when not.
c10::Device ResolveDevice(const std::string& name);

bool CudaAvailable();
int CudaDeviceCount();

}  // namespace tsn
