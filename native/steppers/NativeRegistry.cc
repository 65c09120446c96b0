#include "steppers/NativeRegistry.h"

#include <map>

namespace tsn {

namespace {

// Built on first use, so registrations from other translation units' static initialisers
// find it whatever order those run in; written only during static initialisation, read after.
std::map<std::string, NativeFactory>& Registry() {
  static std::map<std::string, NativeFactory> registry;
  return registry;
}

}  // namespace

NativeRegistration::NativeRegistration(const char* architecture, NativeFactory factory) {
  Registry()[architecture] = factory;
}

NativeFactory FindNativeStepper(const std::string& architecture) {
  const auto found = Registry().find(architecture);
  return found == Registry().end() ? nullptr : found->second;
}

std::vector<std::string> NativeArchitectures() {
  std::vector<std::string> names;
  for (const auto& entry : Registry()) names.push_back(entry.first);
  return names;
}

}  // namespace tsn
