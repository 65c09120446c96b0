#include "steppers/KvCache.h"

#include <algorithm>
#include <cstring>

namespace tsn {

namespace {

template <typename E, typename Convert>
void PutHead(char* keys, char* values, int p, int headDim, const float* key, const float* value, Convert convert) {
  E* k = reinterpret_cast<E*>(keys);
  E* v = reinterpret_cast<E*>(values);
  for (int i = 0; i < headDim; ++i) {
    k[(static_cast<size_t>(p / 16) * headDim + i) * 16 + p % 16] = convert(key[i]);
    v[static_cast<size_t>(p) * headDim + i] = convert(value[i]);
  }
}

}  // namespace

void KvCache::Configure(int layers, int heads, int headDim, int context, WeightType type) {
  layers_ = layers;
  heads_ = heads;
  headDim_ = headDim;
  contextPad_ = (context + 15) / 16 * 16;
  type_ = type;
  elementBytes_ = type == WeightType::F32 ? 4 : 2;
}

void KvCache::Allocate(int slots) {
  slots_ = slots;
  const size_t bytes = static_cast<size_t>(layers_) * slots_ * heads_ * headDim_ * contextPad_ * elementBytes_;
  keys_.Resize((bytes + 3) / 4);
  values_.Resize((bytes + 3) / 4);
}

int64_t KvCache::BytesPerSlot() const {
  return 2LL * layers_ * heads_ * headDim_ * contextPad_ * static_cast<int64_t>(elementBytes_);
}

char* KvCache::At(const AlignedFloats& storage, int layer, int slot, int head) const {
  const size_t block = ((static_cast<size_t>(layer) * slots_ + slot) * heads_ + head) * headDim_ * contextPad_;
  return reinterpret_cast<char*>(storage.get()) + block * elementBytes_;
}

void KvCache::Put(int layer, int slot, int head, int p, const float* key, const float* value) {
  char* keys = At(keys_, layer, slot, head);
  char* values = At(values_, layer, slot, head);
  switch (type_) {
    case WeightType::F32: return PutHead<float>(keys, values, p, headDim_, key, value, [](float x) { return x; });
    case WeightType::BF16: return PutHead<uint16_t>(keys, values, p, headDim_, key, value, FloatToBf16);
    case WeightType::F16: return PutHead<uint16_t>(keys, values, p, headDim_, key, value, FloatToHalf);
    default: return;  // quantized types hold weights, never the cache
  }
}

void KvCache::CopySlot(int from, int to) {
  if (from == to) return;
  // A slot's heads are contiguous within a layer, in both caches.
  const size_t perSlot = static_cast<size_t>(heads_) * headDim_ * contextPad_ * elementBytes_;
  for (int layer = 0; layer < layers_; ++layer) {
    std::memcpy(At(keys_, layer, to, 0), At(keys_, layer, from, 0), perSlot);
    std::memcpy(At(values_, layer, to, 0), At(values_, layer, from, 0), perSlot);
  }
}

void KvCache::CopySlot(int from, int to, int positions) {
  if (from == to) return;
  positions = std::min(std::max(positions, 0), contextPad_);
  const size_t keyBytes = static_cast<size_t>((positions + 15) / 16) * 16 * headDim_ * elementBytes_;
  const size_t valueBytes = static_cast<size_t>(positions) * headDim_ * elementBytes_;
  for (int layer = 0; layer < layers_; ++layer) {
    for (int head = 0; head < heads_; ++head) {
      std::memcpy(At(keys_, layer, to, head), At(keys_, layer, from, head), keyBytes);
      std::memcpy(At(values_, layer, to, head), At(values_, layer, from, head), valueBytes);
    }
  }
}

}  // namespace tsn
