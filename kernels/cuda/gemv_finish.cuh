// What the few-row products (gemv.cu, quant_gemv.cu) share: the streaming
// weight load, the dtype's rounding, load and store, and the end of a warp's
// column: the lanes' partial sums combined by shuffles and the column
// finished by the epilogue of gemv.h (lane m writes row m); and the
// launchers' checks of y, the grid and the epilogue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gemv.h"

namespace shardlm::kernels::cuda {

// 16 bytes of the weight, read once: not kept in L1 (x lives there).
__device__ __forceinline__ uint4 LoadStreaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// An output dtype's rounding (the identity in f32), load and store.
template <typename T>
struct Out;
template <>
struct Out<float> {
  __device__ __forceinline__ static float Round(float x) { return x; }
  __device__ __forceinline__ static float Load(const float* p) { return *p; }
  __device__ __forceinline__ static void Store(float* p, float x) { *p = x; }
};
template <>
struct Out<__nv_bfloat16> {
  __device__ __forceinline__ static float Round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
  __device__ __forceinline__ static float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  __device__ __forceinline__ static void Store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
};

// Column j of y for M rows from each lane's partial sums acc[m][r] (r: the
// weight rows of the column, 2 for kSwiGlu's gate and up):
//   kStore   y[m, j] = round(acc(m, j) + bias[j])
//   kAddTo   y[m, j] = round(y[m, j] + round(acc(m, j) + bias[j]))
//   kSwiGlu  y[m, j] = round(round(silu(round(acc(m, 0)))) * round(acc(m, 1)))
template <typename T, int M, int R, GemvEpilogue E>
__device__ __forceinline__ void FinishColumn(float (&acc)[M][R], int lane, const T* __restrict__ bias,
                                             T* __restrict__ y, int64_t y_stride, int64_t j) {
  using O = Out<T>;
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
    }
  }
  // Every lane holds every sum; lane m writes row m.
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (lane != m) continue;
    T* out = y + m * y_stride + j;
    if constexpr (E == GemvEpilogue::kSwiGlu) {
      const float g = O::Round(acc[m][0]), u = O::Round(acc[m][R - 1]);
      const float silu = O::Round(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
      O::Store(out, __fmul_rn(silu, u));
    } else {
      const float product = O::Round(bias != nullptr ? __fadd_rn(acc[m][0], O::Load(bias + j)) : acc[m][0]);
      O::Store(out, E == GemvEpilogue::kAddTo ? __fadd_rn(O::Load(out), product) : product);
    }
  }
}

// What a launcher checks beyond whether the kernel takes x and w (GemvTakes,
// QuantGemvTakes): y's rows hold its n outputs, the grid of one block per
// `warps` columns fits, and SwiGLU has no bias. nullptr when all hold.
inline const char* GemvLaunchError(GemvEpilogue epilogue, const void* bias, int64_t n, int64_t y_stride,
                                   int warps) {
  if (y_stride < n) return "gemv: y's rows are shorter than its outputs";
  if ((n + warps - 1) / warps > 0x7fffffff) return "gemv: too many columns";
  if (epilogue == GemvEpilogue::kSwiGlu && bias != nullptr) return "gemv: no bias with SwiGLU";
  return nullptr;
}

}  // namespace shardlm::kernels::cuda
