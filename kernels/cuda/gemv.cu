// The few-row products of kernels/cuda/gemv.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "gemv.h"
#include "gemv_finish.cuh"

namespace shardlm::kernels::cuda {
namespace {

constexpr int kWarps = 4;   // output columns per block
constexpr int kUnroll = 4;  // 16-byte loads of each weight row in flight per lane

template <typename T>
struct Elems;
template <>
struct Elems<float> {
  static constexpr int kPerVec = 4;
  __device__ __forceinline__ static void Unpack(const uint4& v, float* out) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
  }
};
template <>
struct Elems<__nv_bfloat16> {
  static constexpr int kPerVec = 8;
  // A bf16 is the high half of an f32.
  __device__ __forceinline__ static void Unpack(const uint4& v, float* out) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
};

// Warp w of block b finishes column j = b * kWarps + w for all M rows. Each
// lane takes kPerVec consecutive elements of every 32 * kPerVec; the lanes'
// partial sums are combined by shuffles at the end.
template <typename T, int M, GemvEpilogue E>
__global__ void __launch_bounds__(kWarps * 32)
    GemvKernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ w, const T* __restrict__ bias,
               T* __restrict__ y, int64_t y_stride, int64_t n, int64_t k) {
  using El = Elems<T>;
  constexpr int V = El::kPerVec;
  constexpr int R = E == GemvEpilogue::kSwiGlu ? 2 : 1;  // weight rows per column
  constexpr int64_t kStep = 32 * V;
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= n) return;
  const T* wr[R];
  wr[0] = w + j * k;
  if constexpr (R == 2) wr[1] = w + (n + j) * k;

  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  }
  for (int64_t base = lane * V; base < k; base += kStep * kUnroll) {
    uint4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * kStep;
#pragma unroll
      for (int r = 0; r < R; ++r) wv[u][r] = idx < k ? LoadStreaming(wr[r] + idx) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * kStep;
      if (idx >= k) break;
      float wf[R][V];
#pragma unroll
      for (int r = 0; r < R; ++r) El::Unpack(wv[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[V];
        El::Unpack(*reinterpret_cast<const uint4*>(x + m * x_stride + idx), xf);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
        }
      }
    }
  }
  FinishColumn<T, M, R, E>(acc, lane, bias, y, y_stride, j);
}

template <typename T, int M>
void LaunchRows(GemvEpilogue e, const T* x, int64_t x_stride, const T* w, const T* bias, T* y,
                int64_t y_stride, int64_t n, int64_t k, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  switch (e) {
    case GemvEpilogue::kStore:
      GemvKernel<T, M, GemvEpilogue::kStore>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kAddTo:
      GemvKernel<T, M, GemvEpilogue::kAddTo>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kSwiGlu:
      GemvKernel<T, M, GemvEpilogue::kSwiGlu>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, nullptr, y, y_stride, n, k);
      break;
  }
}

template <typename T>
void LaunchTyped(GemvEpilogue e, const void* x, int64_t x_stride, const void* w, const void* bias, void* y,
                 int64_t y_stride, int64_t rows, int64_t n, int64_t k, cudaStream_t s) {
  const T* xt = static_cast<const T*>(x);
  const T* wt = static_cast<const T*>(w);
  const T* bt = static_cast<const T*>(bias);
  T* yt = static_cast<T*>(y);
  switch (rows) {
    case 1:
      LaunchRows<T, 1>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 2:
      LaunchRows<T, 2>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 3:
      LaunchRows<T, 3>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 4:
      LaunchRows<T, 4>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 5:
      LaunchRows<T, 5>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 6:
      LaunchRows<T, 6>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    case 7:
      LaunchRows<T, 7>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
    default:
      LaunchRows<T, 8>(e, xt, x_stride, wt, bt, yt, y_stride, n, k, s);
      break;
  }
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool GemvTakes(DType dtype, int64_t rows, int64_t k, const void* x, int64_t x_stride, const void* w) {
  const int64_t per_vec = dtype == DType::kF32 ? 4 : 8;
  return rows >= 1 && rows <= kGemvMaxRows && k > 0 && k % per_vec == 0 && x_stride % per_vec == 0 &&
         Aligned(x) && Aligned(w);
}

const char* LaunchGemv(DType dtype, GemvEpilogue epilogue, const void* x, int64_t x_stride, const void* w,
                       const void* bias, void* y, int64_t y_stride, int64_t rows, int64_t n, int64_t k,
                       void* stream) {
  if (n <= 0) return nullptr;
  if (!GemvTakes(dtype, rows, k, x, x_stride, w)) return "gemv: operands the kernel does not take";
  if (const char* err = GemvLaunchError(epilogue, bias, n, y_stride, kWarps)) return err;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kF32) {
    LaunchTyped<float>(epilogue, x, x_stride, w, bias, y, y_stride, rows, n, k, s);
  } else {
    LaunchTyped<__nv_bfloat16>(epilogue, x, x_stride, w, bias, y, y_stride, rows, n, k, s);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace shardlm::kernels::cuda
