// A loaded TorchScript module's weights as CheckpointWeights: its own tensors, not copies
// (views of them, each holding its tensor alive), and its cache_shape(1).
#pragma once

#include <torch/script.h>

#include "steppers/CheckpointWeights.h"

namespace tsn {

// Parameters and buffers on the CPU, contiguous (others are copied so); floating ones of
// another dtype than float32, bf16 or fp16 as float32 copies. Quantized modules (a string
// `qtype` and a tensor `qweight`) by their weight's name, with in_features or embedding_dim
// as their columns. Throws CodedError(ERR_CHECKPOINT_INTERFACE) for a quantized module whose
// attributes are of the wrong kind.
CheckpointWeights WeightsOfModule(const torch::jit::Module& module);

}  // namespace tsn
