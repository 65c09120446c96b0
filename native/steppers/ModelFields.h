// The scalar fields of a checkpoint's config.json (nested objects flattened with dots, e.g.
// "rope_scaling.factor"), as the TypeScript side parsed them. Native steppers read the
// hyperparameters they need from here instead of parsing JSON in C++.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tsn {

struct ModelFields {
  std::map<std::string, double> numbers;      // numbers and booleans (1 / 0)
  std::map<std::string, std::string> strings;

  bool Has(const std::string& name) const { return numbers.count(name) || strings.count(name); }
  double Number(const std::string& name, double fallback) const {
    auto it = numbers.find(name);
    return it == numbers.end() ? fallback : it->second;
  }
  int64_t Int(const std::string& name, int64_t fallback) const {
    return static_cast<int64_t>(Number(name, static_cast<double>(fallback)));
  }
  std::string String(const std::string& name, const std::string& fallback) const {
    auto it = strings.find(name);
    return it == strings.end() ? fallback : it->second;
  }
};

}  // namespace tsn
