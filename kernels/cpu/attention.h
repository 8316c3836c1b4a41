// Decode attention on the CPU: one query row against its sequence's keys and
// values in the paged KV pool, for the query heads that share one KV head
// (GQA), so each key and value row is read once for the whole group.
//
//   out[g] = softmax(scale * q[g] . k[j] over j) . v[j]      g < group
//
// Scores, softmax and the weighted sum are in f32 whatever the storage type;
// the output is rounded once. Torch-free, one translation unit per
// instruction set as cpu/gemv.h; kernels/attention.cc calls it per
// (row, KV head) and keeps a portable loop for shapes it does not take.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace shardlm::kernels {

// T is float or uint16_t (bf16 bits).
template <typename T>
struct DecodeAttentionArgs {
  const T* q;  // query head g at q + g * q_head_stride, d elements
  int64_t q_head_stride;
  const T* k;  // key of slot s at k + s * kv_slot_stride, d elements (this KV head)
  const T* v;  // value of slot s at v + s * kv_slot_stride
  int64_t kv_slot_stride;
  const int64_t* slots;  // the n keys' slots, in position order
  int64_t n;
  T* out;  // output head g at out + g * out_head_stride
  int64_t out_head_stride;
  int64_t group, d;
  float scale;
  float* scratch;  // group * n floats
};

using DecodeAttentionF32Fn = void (*)(const DecodeAttentionArgs<float>&);
using DecodeAttentionBf16Fn = void (*)(const DecodeAttentionArgs<uint16_t>&);

// The kernel for `isa` (AVX-512 or AVX2), or nullptr where there is none or
// the shape is not one it takes (d a multiple of 16 up to 256).
DecodeAttentionF32Fn DecodeAttentionF32(Isa isa, int64_t d);
DecodeAttentionBf16Fn DecodeAttentionBf16(Isa isa, int64_t d);

namespace internal {
void DecodeAttentionF32Avx512(const DecodeAttentionArgs<float>&);
void DecodeAttentionBf16Avx512(const DecodeAttentionArgs<uint16_t>&);
void DecodeAttentionF32Avx2(const DecodeAttentionArgs<float>&);
void DecodeAttentionBf16Avx2(const DecodeAttentionArgs<uint16_t>&);
}  // namespace internal

}  // namespace shardlm::kernels
