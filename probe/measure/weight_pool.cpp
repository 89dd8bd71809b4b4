#include "measure/weight_pool.h"

#include "coli/base/text.h"

namespace coli::probe {

Result<std::uint64_t> tuning_pool_bytes(const CpuFacts& facts, const MemoryFacts& memory, std::uint64_t requested) {
  std::uint64_t pool_bytes = requested;
  if (pool_bytes == 0) pool_bytes = default_tuning_pool_bytes(facts.caches);
  if (memory.headroom_bytes > 0) pool_bytes = std::min(pool_bytes, memory.headroom_bytes / 8);
  if (pool_bytes < kSmallestPool)
    return make_error("kernel tuning: only " + format_bytes(memory.headroom_bytes) + " of memory headroom; too little for " +
                      format_bytes(kSmallestPool) + " of test weights");
  return pool_bytes;
}

}  // namespace coli::probe
