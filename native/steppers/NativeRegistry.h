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

// A static object of this type in a stepper's .cc registers it at load.
struct NativeRegistration {
  NativeRegistration(const char* architecture, NativeFactory factory);
};

// The factory of an architecture's native stepper; null when it has none.
NativeFactory FindNativeStepper(const std::string& architecture);

// Architectures with a native CPU stepper, in name order.
std::vector<std::string> NativeArchitectures();

}  // namespace tsn
