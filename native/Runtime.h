// Which Stepper runs a language model: the native fast path where the checkpoint is a "gpt"
// on the CPU and the native forward reproduces the checkpoint's own, else its TorchScript.
#pragma once

#include <memory>
#include <string>

#include "Checkpoint.h"
#include "Stepper.h"

namespace tsn {

struct RuntimeRequest {
  std::string runtime = "auto";  // "auto", "native" or "torchscript"
  std::string architecture;      // config.json "architecture"
  std::string gelu = "tanh";     // config.json "gelu"
  int threads = 1;
};

struct RuntimeChoice {
  std::unique_ptr<Stepper> stepper;
  std::string runtime;  // "native" or "torchscript"
  std::string note;     // why "auto" did not pick native, when it did not
};

// Runs on the inference thread. Throws CodedError when "native" was demanded and cannot be
// used, or the request is malformed.
RuntimeChoice ChooseRuntime(const LoadedModel& model, const RuntimeRequest& request);

}  // namespace tsn
