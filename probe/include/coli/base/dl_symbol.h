// Entry points of a library opened at run time with dlopen (the CUDA driver,
// NVML, NCCL), so a binary starts and degrades clearly where it is absent.
#pragma once

#include <dlfcn.h>

namespace coli {

// `function` = the symbol `name`, else `fallback` (an older or unversioned
// name, e.g. cuMemFree for cuMemFree_v2); null when neither exists.
// Returns whether one was found.
template <class Function>
bool resolve_symbol(void* library, Function& function, const char* name, const char* fallback = nullptr) {
  function = reinterpret_cast<Function>(::dlsym(library, name));
  if (!function && fallback) function = reinterpret_cast<Function>(::dlsym(library, fallback));
  return function != nullptr;
}

}  // namespace coli
