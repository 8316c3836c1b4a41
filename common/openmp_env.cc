#include "common/openmp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace shardlm {

void UseShortOpenMpSpin(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc): carry on with libgomp's default spin.
}

}  // namespace shardlm
