// Per-environment state of the addon (worker threads and several Node environments each get
// their own).
#pragma once

#include <napi.h>

namespace tsn {

struct AddonData {
  Napi::FunctionReference torchModel;
};

}  // namespace tsn
