// Free memory of an accelerator, for sizing the KV cache (without CUDA headers, a CPU-only
// libtorch or a node-gyp build that cannot see the toolkit, it reports 0: unknown), and the
// host-to-device copy that does not wait for the device.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace tsn {

// Bytes free on `device` now (cudaMemGetInfo); 0 when unknown or not a CUDA device.
int64_t DeviceFreeBytes(c10::Device device);

// A small host tensor onto `device`. On CUDA the copy goes through pinned memory and does not
// block: it is queued behind the kernels already launched instead of waiting for them (a
// pageable copy synchronises the stream), so a step's only wait is for its sampled ids.
inline at::Tensor Upload(const at::Tensor& host, c10::Device device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, host.scalar_type(), /*non_blocking=*/true);
}

}  // namespace tsn
