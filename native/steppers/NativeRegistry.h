// Architecture name (config.json "architecture") -> its native CPU stepper. Each stepper
// registers itself from its own .cc with a static NativeRegistration, so the next
// architecture is one new stepper and nothing else on the native side; runtime/Runtime.cc
// looks the architecture up here (test/native/addon.test.ts checks the names against
// python/torchserve_node/architectures.json).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "steppers/Stepper.h"

namespace tsn {

using NativeFactory = std::unique_ptr<Stepper> (*)(const NativeContext& context);

// How the architecture's TorchScript module (python/torchserve_node/<module>.py) is known in
// its archive without running it: the class of the archive's root module, as torch.jit.save
// names it, and the int attribute its cache_shape(batch) reads for the KV heads. The method is
// [n_layer, 2, batch, <kvHeads>, block_size, head_dim] in every architecture's module, so a
// load with no module can take the cache shape from the attributes (ArchiveCacheShape).
struct ArchiveModule {
  const char* rootClass;
  const char* kvHeads;
};

// A static object of this type in a stepper's .cc registers it at load.
struct NativeRegistration {
  NativeRegistration(const char* architecture, NativeFactory factory, ArchiveModule module);
};

// The factory of an architecture's native stepper; null when it has none.
NativeFactory FindNativeStepper(const std::string& architecture);

// The architecture's module as its archive shows it; null when it has no native stepper.
const ArchiveModule* FindArchiveModule(const std::string& architecture);

// Architectures with a native CPU stepper, in name order.
std::vector<std::string> NativeArchitectures();

}  // namespace tsn
