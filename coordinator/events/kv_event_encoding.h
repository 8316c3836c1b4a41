// vLLM's wire format for KV cache events (vllm/distributed/kv_events.py, its
// array-like msgspec structs), in MessagePack (msgpack-c):
//
//   batch         [timestamp (float seconds), [event, ...], data-parallel rank]
//   BlockStored   ["BlockStored", [hash, ...], parent hash or nil, [token id, ...],
//                  block size, LoRA id (nil), medium]
//   BlockRemoved  ["BlockRemoved", [hash, ...], medium]
//   AllBlocksCleared  ["AllBlocksCleared"]
//
// Hashes are shardlm's 64-bit chained prefix hashes (kv/block_allocator.h),
// sent as unsigned integers. See docs/kv_events.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_events.h"

namespace shardlm {

struct KvEventFormat {
  int32_t block_size = 16;
  std::string medium = "GPU";  // where the blocks live: "GPU" or "CPU"
  int32_t data_parallel_rank = 0;
};

// One batch's payload (the multipart message's third frame).
std::string EncodeKvEventBatch(double timestamp_s, const std::vector<KvEvent>& events,
                               const KvEventFormat& format);

// A sequence number as its frame: 8 bytes, big-endian (-1 ends a replay).
std::string SequenceFrame(int64_t seq);

}  // namespace shardlm
