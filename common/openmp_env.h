// A short OpenMP spin for shardlm's processes, set before libgomp starts.
//
// After a parallel region libgomp's idle threads spin for GOMP_SPINCOUNT
// iterations (300,000 by default, milliseconds here) before they sleep. On a
// host with other busy processes that spinning takes the CPU the step's next
// thread (gRPC, the engine loop) is waiting for: with two busy neighbours a
// tiny model's 128-token stream took 45-70 s against 1.7 s with a spin of
// 10,000 (tests/integration/load_test.py, many_streams), and decode at the
// benchmark model's size is the same either way (docs/cpu_kernels.md).
//
// libgomp reads its environment when it is loaded, before main, so main
// calls this first: unless the user chose (GOMP_SPINCOUNT or OMP_WAIT_POLICY
// set), it sets GOMP_SPINCOUNT and runs the same binary again. That costs a
// second load of libtorch (about 0.6 s here), so only the long-running
// commands (serve, coordinator, worker) and the benchmarks do it; workers
// that `serve` starts inherit the setting.
#pragma once

namespace shardlm {

void UseShortOpenMpSpin(char** argv);

}  // namespace shardlm
