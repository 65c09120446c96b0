// The native steppers' KV cache: per layer, slot (row) and kv head, keys in tiles of 16
// positions, each tile dim-major (the scores of 16 keys come from one contiguous tile, see
// KernelSet::attendHeads), and values position-major. Stored as float32, or as bf16 / fp16
// for 16-bit checkpoints (half the bytes per slot and per token attention streams; attention
// widens them back to float32).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/Kernels.h"

namespace tsn {

class KvCache {
 public:
  void Configure(int layers, int heads, int headDim, int context, WeightType type);
  // Room for `slots` rows. Never read before written (attention sees only positions already
  // fed), so not cleared.
  void Allocate(int slots);
  // Stores position p's key and value (headDim floats each) of one head of one row.
  void Put(int layer, int slot, int head, int p, const float* key, const float* value);
  // Makes slot `to` a copy of slot `from` (every layer, head and position).
  void CopySlot(int from, int to);
  // Copies positions 0..positions-1 only (whole key tiles: the rest of the last tile too).
  void CopySlot(int from, int to, int positions);
  const void* Keys(int layer, int slot, int head) const { return At(keys_, layer, slot, head); }
  const void* Values(int layer, int slot, int head) const { return At(values_, layer, slot, head); }
  WeightType type() const { return type_; }
  int slots() const { return slots_; }
  int contextPad() const { return contextPad_; }
  int64_t BytesPerSlot() const;

 private:
  char* At(const AlignedFloats& storage, int layer, int slot, int head) const;

  int layers_ = 0, heads_ = 0, headDim_ = 0, contextPad_ = 0, slots_ = 0;
  size_t elementBytes_ = 4;
  WeightType type_ = WeightType::F32;
  AlignedFloats keys_, values_;  // raw storage, elementBytes_ per value
};

}  // namespace tsn
