// The threads that run a step's parallel loops on the CPU (docs/cpu_kernels.md,
// "The step thread pool").
//
// A decode step has about 60 parallel loops (four products and the attention
// per layer, the LM head, sampling), each tens of microseconds long. Starting
// an OpenMP region (at::parallel_for) costs 3.7-4 us on a 2-core x86 VM (measured
// by shardlm_kernels_bench) with the team already spinning, and so does an empty one.
// Here a run costs what it takes the workers to see one atomic word change and
// report back: 0.9 us for an empty 2-part run. Workers spin for a short while after a run
// (KernelOptions::pool_spin_us, 100 by default), long enough to span the gaps between a step's loops, then
// sleep on a condition variable, so an idle process costs no CPU.
//
// Torch-free; kernels/parallel.h adapts it to at::parallel_for's interface.
#pragma once

namespace shardlm::kernels {

// Calls fn(ctx, part) once for each part in [0, parts) and returns when all
// have returned: part 0 on the calling thread, the others on the pool's
// workers (started on first use, parts - 1 of them). Every part runs on the
// caller, in order, when parts is 1, when the caller is itself running a
// part, or while another thread's run holds the pool. fn must not throw.
void RunParts(int parts, void (*fn)(void* ctx, int part), void* ctx);

// Whether this thread is running a part of a run with more than one part.
bool InPoolPart();

// Whether the step's loops use the pool (KernelOptions::step_pool; off:
// ATen's OpenMP regions instead, for comparisons; kernels/parallel.h).
bool StepPoolEnabled();

// Convenience: RunParts over a callable f(int part).
template <typename F>
void RunParts(int parts, const F& f) {
  RunParts(
      parts, [](void* ctx, int part) { (*static_cast<const F*>(ctx))(part); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

}  // namespace shardlm::kernels
