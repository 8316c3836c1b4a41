#include "common/step_memory.h"

#include <malloc.h>

namespace shardlm {

void RetainStepMemory() {
  // 1 GiB: larger than any activation of a step; the KV pool and weights are
  // allocated once and are unaffected either way.
  constexpr int kThreshold = 1 << 30;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

}  // namespace shardlm
