// Collectives through shared memory, for ranks on one host.
//
// When every rank of a group can map the same POSIX shared-memory segment
// (same host, same /dev/shm), the forward pass's all-gathers, reduce-scatters
// and the logits' gather go through it: each rank copies its part into its
// slot, announces it with an atomic counter, waits for the others (spinning
// briefly, then on a futex), and reads what it needs straight from their
// slots. No sockets, no copies beyond the one in and the one out, and a
// reduce-scatter sums each element once in f32 and rounds once, so bf16
// travels as bf16. Everything else (all-reduce, broadcast, barrier) and any
// tensor too large for a slot row goes to the fallback communicator (Gloo).
//
// Failures are reported as Gloo's are: a peer that exits is seen within
// ~10 ms (each rank holds an open-file-description lock on its own byte of
// the segment; the kernel drops it when the process dies) and ends the
// collective with UNAVAILABLE naming the rank; a peer that stops answering
// ends it with DEADLINE_EXCEEDED after the timeout. Either breaks the
// communicator for good, as with Gloo, and the group re-forms.
//
//   auto comm = MaybeUseSharedMemory(rank, store, std::move(gloo), ShmOptions{prefix, timeout});
//   // *comm is shared memory if all ranks could map it, else the Gloo one, on every rank alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace gloo::rendezvous {
class Store;
}

namespace shardlm {

struct ShmOptions {
  std::string prefix;  // store key prefix, unique per group (the Gloo prefix)
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  int64_t slot_bytes = int64_t{4} << 20;  // per rank and buffer (two buffers)
};

// Sets up a segment through `store` and returns a shared-memory communicator
// wrapping `fallback` if every rank mapped it, else `fallback` itself. All
// ranks must call it together; all reach the same answer.
std::unique_ptr<Communicator> MaybeUseSharedMemory(RankInfo rank, gloo::rendezvous::Store& store,
                                                   std::unique_ptr<Communicator> fallback,
                                                   const ShmOptions& options);

// True for a communicator made by MaybeUseSharedMemory that uses the segment.
bool IsSharedMemory(const Communicator& comm);

}  // namespace shardlm
