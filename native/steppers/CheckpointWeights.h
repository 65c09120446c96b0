// A checkpoint's weights as a native stepper reads them: host memory by name, with no tensor
// library. Built from a loaded TorchScript module (ModuleWeights.h) or, without libtorch, from
// the archive's records where they lie in the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tsn {

enum class WeightDtype { F32, BF16, F16, U8 };

// A contiguous, row-major tensor in host memory.
struct WeightView {
  WeightDtype dtype = WeightDtype::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::shared_ptr<const void> owner;  // keeps `data` alive

  int64_t size(size_t dim) const { return shape[dim]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

// A quantized matrix (quant.py's QuantLinear / QuantEmbedding: the uint8 buffer `qweight` of
// GGUF rows, [rows, row bytes], and its `qtype`), `cols` values a row.
struct QuantizedWeight {
  WeightView rows;
  std::string qtype;
  int64_t cols = 0;
};

struct CheckpointWeights {
  // Parameters and buffers by their dotted names ("layers.0.attn_norm.weight", "rope_inv_freq"),
  // float32, bf16 or fp16.
  std::map<std::string, WeightView> tensors;
  // Quantized matrices by their weight's name ("layers.0.q_proj.weight").
  std::map<std::string, QuantizedWeight> quantized;
  // The checkpoint's cache_shape(1): [layers, 2, 1, kv heads, context, head dim].
  std::vector<int64_t> cacheShape;
};

}  // namespace tsn
