#include "common/DeviceMemory.h"

#if defined(TSN_TORCH_HAS_CUDA) && TSN_TORCH_HAS_CUDA && __has_include(<cuda_runtime_api.h>)
#define TSN_DEVICE_MEMORY_CUDA 1
#include <cuda_runtime_api.h>
#endif

namespace tsn {

int64_t DeviceFreeBytes(c10::Device device) {
#ifdef TSN_DEVICE_MEMORY_CUDA
  if (!device.is_cuda()) return 0;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return 0;
  if (device.has_index() && cudaSetDevice(device.index()) != cudaSuccess) return 0;
  size_t free = 0, total = 0;
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaSetDevice(previous);
  return ok ? static_cast<int64_t>(free) : 0;
#else
  (void)device;
  return 0;
#endif
}

}  // namespace tsn
