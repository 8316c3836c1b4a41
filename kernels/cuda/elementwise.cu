// The element-wise kernels of kernels/cuda/elementwise.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "elementwise.h"

namespace shardlm::kernels::cuda {
namespace {

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
// Rounds to the storage type (the identity for f32).
__device__ __forceinline__ float Round(float x, const float*) { return x; }
__device__ __forceinline__ float Round(float x, const __nv_bfloat16*) {
  return __bfloat162float(__float2bfloat16_rn(x));
}
__device__ __forceinline__ void Store(float* p, int64_t i, float x) { p[i] = x; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t i, float x) { p[i] = __float2bfloat16_rn(x); }

constexpr int kThreads = 256;

// One block per row: the sum of squares by a block reduction, then the row scaled.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const T* x, int64_t x_stride, const T* w, T* out, int64_t n, float eps) {
  __shared__ float partial[kThreads / 32];
  const T* row = x + blockIdx.x * x_stride;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float v = Load(row, i);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int wi = 0; wi < kThreads / 32; ++wi) total += partial[wi];
  // As ATen's mean (the sum times 1/n), plus eps, rsqrt.
  const float r = rsqrtf(__fadd_rn(__fmul_rn(total, 1.0f / static_cast<float>(n)), eps));
  T* o = out + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    Store(o, i, __fmul_rn(Round(__fmul_rn(Load(row, i), r), x), Load(w, i)));
  }
}

// One block per row; thread i of a head takes the pair (i, i + half). The
// first heads + kv_heads heads are rotated; with `slots`, the last kv_heads of
// them (the k heads) and the kv_heads heads after them (v) are also written
// to the row's KV slot.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    RotaryKernel(T* x, int64_t ld, int64_t heads, int64_t kv_heads, int64_t head_dim, const float* cos,
                 const float* sin, const int64_t* slots, T* k_cache, T* v_cache) {
  const int64_t half = head_dim / 2, slot_elems = kv_heads * head_dim;
  T* row = x + blockIdx.x * ld;
  const float* c = cos + blockIdx.x * half;
  const float* s = sin + blockIdx.x * half;
  T* k_slot = slots != nullptr ? k_cache + slots[blockIdx.x] * slot_elems : nullptr;
  for (int64_t k = threadIdx.x; k < (heads + kv_heads) * half; k += kThreads) {
    const int64_t h = k / half, i = k % half;
    T* v = row + h * head_dim;
    const float x1 = Load(v, i), x2 = Load(v, i + half);
    const float y1 = __fsub_rn(__fmul_rn(x1, c[i]), __fmul_rn(x2, s[i]));
    const float y2 = __fadd_rn(__fmul_rn(x2, c[i]), __fmul_rn(x1, s[i]));
    Store(v, i, y1);
    Store(v, i + half, y2);
    if (k_slot != nullptr && h >= heads) {
      T* out = k_slot + (h - heads) * head_dim;
      Store(out, i, y1);
      Store(out, i + half, y2);
    }
  }
  if (slots == nullptr) return;
  T* v_slot = v_cache + slots[blockIdx.x] * slot_elems;
  const T* vs = row + (heads + kv_heads) * head_dim;
  for (int64_t k = threadIdx.x; k < slot_elems; k += kThreads) v_slot[k] = vs[k];
}

template <typename T>
void LaunchRotaryRows(void* x, int64_t ld, int64_t rows, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      const float* cos, const float* sin, const int64_t* slots, void* k_cache, void* v_cache,
                      cudaStream_t s) {
  RotaryKernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      static_cast<T*>(x), ld, heads, kv_heads, head_dim, cos, sin, slots, static_cast<T*>(k_cache),
      static_cast<T*>(v_cache));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SiluMulKernel(const T* gate_up, T* out, int64_t rows, int64_t inter) {
  const int64_t total = rows * inter;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = k / inter, i = k % inter;
    const float g = Load(gate_up, r * 2 * inter + i), u = Load(gate_up, r * 2 * inter + inter + i);
    const float silu = Round(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), gate_up);
    Store(out, k, __fmul_rn(silu, u));
  }
}

const char* LastError() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

unsigned Blocks(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace

const char* LaunchRmsNorm(DType dtype, const void* x, int64_t x_stride, const void* w, void* out,
                          int64_t rows, int64_t n, float eps, void* stream) {
  if (rows <= 0) return nullptr;
  if (n <= 0 || x_stride < n || rows > 0x7fffffff) return "rms norm: bad shape";
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kF32) {
    RmsNormKernel<float><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const float*>(x), x_stride, static_cast<const float*>(w), static_cast<float*>(out), n,
        eps);
  } else {
    RmsNormKernel<__nv_bfloat16><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(x), x_stride, static_cast<const __nv_bfloat16*>(w),
        static_cast<__nv_bfloat16*>(out), n, eps);
  }
  return LastError();
}

const char* LaunchRotary(DType dtype, void* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                         const float* cos, const float* sin, void* stream) {
  if (rows <= 0 || heads <= 0) return nullptr;
  if (head_dim <= 0 || head_dim % 2 != 0 || ld < heads * head_dim || rows > 0x7fffffff)
    return "rotary: bad shape";
  const auto s = static_cast<cudaStream_t>(stream);
  auto launch = dtype == DType::kF32 ? LaunchRotaryRows<float> : LaunchRotaryRows<__nv_bfloat16>;
  launch(x, ld, rows, heads, 0, head_dim, cos, sin, nullptr, nullptr, nullptr, s);
  return LastError();
}

const char* LaunchRotaryKv(DType dtype, void* x, int64_t ld, int64_t rows, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, const float* cos, const float* sin, const int64_t* slots,
                           void* k_cache, void* v_cache, void* stream) {
  if (rows <= 0) return nullptr;
  if (head_dim <= 0 || head_dim % 2 != 0 || heads < 0 || kv_heads <= 0 ||
      ld < (heads + 2 * kv_heads) * head_dim || rows > 0x7fffffff || slots == nullptr) {
    return "rotary_kv: bad shape";
  }
  const auto s = static_cast<cudaStream_t>(stream);
  auto launch = dtype == DType::kF32 ? LaunchRotaryRows<float> : LaunchRotaryRows<__nv_bfloat16>;
  launch(x, ld, rows, heads, kv_heads, head_dim, cos, sin, slots, k_cache, v_cache, s);
  return LastError();
}

const char* LaunchSiluMul(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t inter,
                          void* stream) {
  if (rows <= 0) return nullptr;
  if (inter <= 0) return "silu_mul: bad shape";
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = Blocks(rows * inter);
  if (dtype == DType::kF32) {
    SiluMulKernel<float><<<blocks, kThreads, 0, s>>>(static_cast<const float*>(gate_up),
                                                     static_cast<float*>(out), rows, inter);
  } else {
    SiluMulKernel<__nv_bfloat16><<<blocks, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(gate_up),
                                                             static_cast<__nv_bfloat16*>(out), rows, inter);
  }
  return LastError();
}

}  // namespace shardlm::kernels::cuda
