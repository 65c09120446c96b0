// What kernels/ab.cc and kernels/attend-ab.cc share: a monotonic clock, and the KernelSet of
// one family from each of two builds of the kernels (BASE.so, HEAD.so), each library loaded
// on its own (RTLD_LOCAL; kernels-ab.sh builds them with -fno-gnu-unique, so neither uses the
// other's function-local statics).
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "kernels/Kernels.h"

inline double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// sets[0] from base, sets[1] from head; false (after printing why) when a library will not load.
// AB_BASE_FAMILY names another family for the base side (e.g. a family the base build lacks,
// timed against one it has: FAMILY amx, AB_BASE_FAMILY=avx512_bf16).
inline bool LoadSides(const char* base, const char* head, const std::string& family, const tsn::KernelSet* sets[2]) {
  const char* baseFamily = std::getenv("AB_BASE_FAMILY");
  using Select = const tsn::KernelSet& (*)(const std::string&);
  const char* symbol = "_ZN3tsn13SelectKernelsERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
  const char* paths[2] = {base, head};
  for (int side = 0; side < 2; ++side) {
    void* library = dlopen(paths[side], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      std::fprintf(stderr, "%s\n", dlerror());
      return false;
    }
    const std::string name = side == 0 && baseFamily != nullptr && *baseFamily ? std::string(baseFamily) : family;
    sets[side] = &reinterpret_cast<Select>(dlsym(library, symbol))(name);
  }
  return true;
}
