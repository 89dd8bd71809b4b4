#include "coli/backend/backend.h"

#include <string>

#include "cpu/cpu_backend.h"

namespace coli::backend {

// The one place that knows every backend of this build; a new backend adds
// its case here (docs/backends.md).
Result<std::unique_ptr<Backend>> create_backend(const BackendProps& props) {
  switch (props.kind) {
    case BackendKind::cpu: {
      auto cpu = CpuBackend::create(props);
      if (!cpu) return cpu.error();
      return std::unique_ptr<Backend>(std::move(*cpu));
    }
    case BackendKind::vulkan:
    case BackendKind::cuda:
      break;
  }
  return make_error("this build has no " + std::string(backend_kind_name(props.kind)) + " compute backend for " +
                    props.name + ": run with the CPU backend (coli-plan --gpu none)");
}

}  // namespace coli::backend
