#include "steppers/NativeRegistry.h"

#include <map>

namespace tsn {

namespace {

// Built on first use, so registrations from other translation units' static initialisers
// find it whatever order those run in; written only during static initialisation, read after.
struct Entry {
  NativeFactory factory;
  ArchiveModule module;
};

std::map<std::string, Entry>& Registry() {
  static std::map<std::string, Entry> registry;
  return registry;
}

}  // namespace

NativeRegistration::NativeRegistration(const char* architecture, NativeFactory factory, ArchiveModule module) {
  Registry()[architecture] = {factory, module};
}

NativeFactory FindNativeStepper(const std::string& architecture) {
  const auto found = Registry().find(architecture);
  return found == Registry().end() ? nullptr : found->second.factory;
}

const ArchiveModule* FindArchiveModule(const std::string& architecture) {
  const auto found = Registry().find(architecture);
  return found == Registry().end() ? nullptr : &found->second.module;
}

std::vector<std::string> NativeArchitectures() {
  std::vector<std::string> names;
  for (const auto& entry : Registry()) names.push_back(entry.first);
  return names;
}

}  // namespace tsn
