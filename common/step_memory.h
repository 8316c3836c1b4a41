// Keeps the memory a step frees for the next step.
//
// A forward pass allocates its activations afresh each step (at::empty), and
// glibc serves blocks above its mmap threshold (128 KB at first) with mmap:
// every step then faults in and zeroes new pages and unmaps them again. At
// batch 8 that was half of an f32 prefill's time (docs/cpu_kernels.md).
// Raising the mmap and trim thresholds makes freed blocks stay in the heap,
// so from the second step on the same addresses are reused without a fault:
// the arena a caching allocator would give, from the allocator already there.
// The cost is that the process keeps its peak activation memory.
//
// Called by RankWorker::Load once the weights and the KV pool are allocated
// (they keep their own mappings), before the first step.
#pragma once

namespace shardlm {

void RetainStepMemory();

}  // namespace shardlm
