// Free memory of an accelerator, for sizing the KV cache. Without CUDA headers (a CPU-only
// libtorch, or a node-gyp build that cannot see the toolkit) it reports 0: unknown.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace tsn {

// Bytes free on `device` now (cudaMemGetInfo); 0 when unknown or not a CUDA device.
int64_t DeviceFreeBytes(c10::Device device);

}  // namespace tsn
