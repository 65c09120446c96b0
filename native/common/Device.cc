#include "common/Device.h"

#include <torch/cuda.h>

#include <regex>

#include "common/ErrorCodes.h"
#include "common/Errors.h"

#ifndef TSN_TORCH_HAS_CUDA
#define TSN_TORCH_HAS_CUDA 0
#endif

namespace tsn {

bool CudaAvailable() { return torch::cuda::is_available(); }

int CudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

c10::Device ResolveDevice(const std::string& name) {
  static const std::regex pattern("^(cpu|cuda)(:([0-9]+))?$");
  std::smatch match;
  if (!std::regex_match(name, match, pattern) || (match[1] == "cpu" && match[2].matched)) {
    throw CodedError(ErrorCode::kDevice, "Unknown device \"" + name +
                                       "\": expected \"cpu\", \"cuda\" or \"cuda:N\".");
  }
  if (match[1] == "cpu") return c10::Device(c10::kCPU);

  if (!CudaAvailable()) {
    if (!TSN_TORCH_HAS_CUDA) {
      throw CodedError(
          ErrorCode::kDevice,
          "Device \"" + name +
              "\" was requested, but the addon was built against a CPU-only libtorch. "
              "Rebuild it against a CUDA libtorch (LIBTORCH=/path/to/libtorch-cuda or a "
              "CUDA Python torch; see README, GPU hosts) and run `npm run build:native`, "
              "or use SERVICE_DEVICE=cpu.");
    }
    throw CodedError(ErrorCode::kDevice, "Device \"" + name +
                                       "\" was requested, but libtorch sees no CUDA GPU "
                                       "(check the driver and CUDA_VISIBLE_DEVICES), or use "
                                       "SERVICE_DEVICE=cpu.");
  }
  const int index = match[3].matched ? std::stoi(match[3].str()) : 0;
  const int count = CudaDeviceCount();
  if (index >= count) {
    throw CodedError(ErrorCode::kDevice, "Device \"" + name + "\" does not exist: libtorch sees " +
                                       std::to_string(count) + " CUDA device(s).");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace tsn
