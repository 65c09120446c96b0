// Which Stepper runs a language model. A registry maps an architecture name (config.json
// "architecture") to its native CPU stepper; "auto" uses it where the checkpoint is on the
// CPU and the native forward reproduces the checkpoint's own, else the TorchScript forward.
// The next architecture is one new stepper plus one line in the registry (Runtime.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "Checkpoint.h"
#include "ModelFields.h"
#include "Stepper.h"

namespace tsn {

struct RuntimeRequest {
  std::string runtime = "auto";   // "auto", "native" or "torchscript"
  std::string architecture;       // config.json "architecture"
  std::string kernels = "auto";   // kernel family cap for native steppers (SERVICE_KERNELS)
  c10::ScalarType dtype = at::kFloat;  // the checkpoint's dtype: its TorchScript cache
  int64_t kvBudgetBytes = 0;      // cache budget (SERVICE_KV_BUDGET_MB); 0: each runtime's default
  ModelFields fields;             // config.json, flattened
  int threads = 1;
};

struct RuntimeChoice {
  std::unique_ptr<Stepper> stepper;
  std::string runtime;  // "native" or "torchscript"
  std::string kernels;  // the kernel family of a native stepper; empty for TorchScript
  std::string note;     // why "auto" did not pick native, when it did not
};

using NativeFactory = std::unique_ptr<Stepper> (*)(const NativeContext& context);

// Architectures with a native CPU stepper.
std::vector<std::string> NativeArchitectures();

// Runs on the inference thread. Throws CodedError when "native" was demanded and cannot be
// used, or the request is malformed.
RuntimeChoice ChooseRuntime(const LoadedModel& model, const RuntimeRequest& request);

}  // namespace tsn
