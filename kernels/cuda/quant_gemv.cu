// The few-row products over GGUF blocks of kernels/cuda/quant_gemv.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gemv_finish.cuh"
#include "quant_gemv.h"

namespace shardlm::kernels::cuda {
namespace {

constexpr int kWarps = 4;   // output columns per block
constexpr int kUnroll = 2;  // blocks of each weight row in flight per lane

__device__ __forceinline__ float HalfBits(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

template <typename T>
struct Act;
template <>
struct Act<float> {
  // The 32 activations of a block, 8 loads of 4.
  __device__ __forceinline__ static void Block(const float* p, float* out) {
    const float4* v = reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = v[i];
      out[4 * i] = f.x;
      out[4 * i + 1] = f.y;
      out[4 * i + 2] = f.z;
      out[4 * i + 3] = f.w;
    }
  }
};
template <>
struct Act<__nv_bfloat16> {
  // 4 loads of 8; a bf16 is the high half of an f32.
  __device__ __forceinline__ static void Block(const __nv_bfloat16* p, float* out) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 u = v[i];
      const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        out[8 * i + 2 * w] = __uint_as_float(words[w] << 16);
        out[8 * i + 2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
      }
    }
  }
};

// A block's quants, as loaded: 16 bytes (4-bit) or 32 (Q8_0).
struct Quants {
  uint4 lo, hi;  // hi: Q8_0's second half
};

template <BlockFormat F>
__device__ __forceinline__ Quants LoadQuants(const uint8_t* q, int64_t block) {
  Quants out;
  if constexpr (F == BlockFormat::kQ8_0) {
    out.lo = LoadStreaming(q + 32 * block);
    out.hi = LoadStreaming(q + 32 * block + 16);
  } else {
    out.lo = LoadStreaming(q + 16 * block);
    out.hi = make_uint4(0, 0, 0, 0);
  }
  return out;
}

// The block's 32 weights before the scale: nibble - 8 (Q4_0), nibble (Q4_1)
// or the stored int8 (Q8_0); weight i of a 4-bit block is the low nibble of
// byte i, weight i + 16 its high nibble.
template <BlockFormat F>
__device__ __forceinline__ void Unpack(const Quants& v, float* q) {
  if constexpr (F == BlockFormat::kQ8_0) {
    const unsigned words[8] = {v.lo.x, v.lo.y, v.lo.z, v.lo.w, v.hi.x, v.hi.y, v.hi.z, v.hi.w};
#pragma unroll
    for (int w = 0; w < 8; ++w) {
#pragma unroll
      for (int b = 0; b < 4; ++b) q[4 * w + b] = static_cast<float>(static_cast<int8_t>(words[w] >> (8 * b)));
    }
  } else {
    constexpr int kOffset = F == BlockFormat::kQ4_0 ? 8 : 0;
    const unsigned words[4] = {v.lo.x, v.lo.y, v.lo.z, v.lo.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const unsigned byte = (words[w] >> (8 * b)) & 0xffu;
        q[4 * w + b] = static_cast<float>(static_cast<int>(byte & 0xfu) - kOffset);
        q[16 + 4 * w + b] = static_cast<float>(static_cast<int>(byte >> 4) - kOffset);
      }
    }
  }
}

// Warp w of block b finishes column j = b * kWarps + w for all M rows. Lane
// l takes the weight's blocks l, l + 32, ...; the lanes' partial sums are
// combined by shuffles at the end, and lane m writes row m.
template <typename T, BlockFormat F, int M, GemvEpilogue E>
__global__ void __launch_bounds__(kWarps * 32)
    QuantGemvKernel(const T* __restrict__ x, int64_t x_stride, const uint8_t* __restrict__ quants,
                    const uint16_t* __restrict__ scales, const uint16_t* __restrict__ mins,
                    const T* __restrict__ bias, T* __restrict__ y, int64_t y_stride, int64_t n, int64_t k) {
  constexpr int R = E == GemvEpilogue::kSwiGlu ? 2 : 1;  // weight rows per column
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= n) return;
  const int64_t blocks = k / 32;
  int64_t row[R];
  row[0] = j;
  if constexpr (R == 2) row[1] = n + j;

  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  }
  for (int64_t b0 = lane; b0 < blocks; b0 += 32 * kUnroll) {
    Quants qv[kUnroll][R];
    float d[kUnroll][R], mn[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t at = row[r] * blocks + b;
        const bool in = b < blocks;
        qv[u][r] = in ? LoadQuants<F>(quants, at) : Quants{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
        d[u][r] = in ? HalfBits(scales[at]) : 0.0f;
        mn[u][r] = in && F == BlockFormat::kQ4_1 ? HalfBits(mins[at]) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + 32 * u;
      if (b >= blocks) break;
      float q[R][32];
#pragma unroll
      for (int r = 0; r < R; ++r) Unpack<F>(qv[u][r], q[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xb[32];
        Act<T>::Block(x + m * x_stride + 32 * b, xb);
        float xsum = 0.0f;
        if constexpr (F == BlockFormat::kQ4_1) {
#pragma unroll
          for (int i = 0; i < 32; ++i) xsum += xb[i];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < 32; ++i) dot = fmaf(xb[i], q[r][i], dot);
          acc[m][r] = fmaf(d[u][r], dot, acc[m][r]);
          if constexpr (F == BlockFormat::kQ4_1) acc[m][r] = fmaf(mn[u][r], xsum, acc[m][r]);
        }
      }
    }
  }
  FinishColumn<T, M, R, E>(acc, lane, bias, y, y_stride, j);
}

template <typename T, BlockFormat F, int M>
void LaunchRows(GemvEpilogue e, const T* x, int64_t x_stride, const QuantWeightPlanes& w, const T* bias, T* y,
                int64_t y_stride, int64_t n, int64_t k, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  const auto* q = static_cast<const uint8_t*>(w.quants);
  const auto* d = static_cast<const uint16_t*>(w.d);
  const auto* m = static_cast<const uint16_t*>(w.m);
  switch (e) {
    case GemvEpilogue::kStore:
      QuantGemvKernel<T, F, M, GemvEpilogue::kStore>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, q, d, m, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kAddTo:
      QuantGemvKernel<T, F, M, GemvEpilogue::kAddTo>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, q, d, m, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kSwiGlu:
      QuantGemvKernel<T, F, M, GemvEpilogue::kSwiGlu>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, q, d, m, nullptr, y, y_stride, n, k);
      break;
  }
}

template <typename T, BlockFormat F>
void LaunchFormat(GemvEpilogue e, const T* x, int64_t x_stride, const QuantWeightPlanes& w, const T* bias,
                  T* y, int64_t y_stride, int64_t rows, int64_t n, int64_t k, cudaStream_t s) {
  switch (rows) {
    case 1:
      return LaunchRows<T, F, 1>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 2:
      return LaunchRows<T, F, 2>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 3:
      return LaunchRows<T, F, 3>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 4:
      return LaunchRows<T, F, 4>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 5:
      return LaunchRows<T, F, 5>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 6:
      return LaunchRows<T, F, 6>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    case 7:
      return LaunchRows<T, F, 7>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
    default:
      return LaunchRows<T, F, 8>(e, x, x_stride, w, bias, y, y_stride, n, k, s);
  }
}

template <typename T>
void LaunchTyped(GemvEpilogue e, const void* x, int64_t x_stride, const QuantWeightPlanes& w,
                 const void* bias, void* y, int64_t y_stride, int64_t rows, int64_t n, int64_t k,
                 cudaStream_t s) {
  const T* xt = static_cast<const T*>(x);
  const T* bt = static_cast<const T*>(bias);
  T* yt = static_cast<T*>(y);
  switch (w.format) {
    case BlockFormat::kQ8_0:
      return LaunchFormat<T, BlockFormat::kQ8_0>(e, xt, x_stride, w, bt, yt, y_stride, rows, n, k, s);
    case BlockFormat::kQ4_0:
      return LaunchFormat<T, BlockFormat::kQ4_0>(e, xt, x_stride, w, bt, yt, y_stride, rows, n, k, s);
    default:
      return LaunchFormat<T, BlockFormat::kQ4_1>(e, xt, x_stride, w, bt, yt, y_stride, rows, n, k, s);
  }
}

// Thread t dequantizes block t % (k / 32) of output row t / (k / 32).
template <typename T, BlockFormat F>
__global__ void QuantRowsKernel(const uint8_t* __restrict__ quants, const uint16_t* __restrict__ scales,
                                const uint16_t* __restrict__ mins, int64_t n, int64_t k,
                                const int64_t* __restrict__ index, int64_t count, T* __restrict__ out) {
  const int64_t blocks = k / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count * blocks) return;
  const int64_t c = t / blocks, b = t % blocks;
  int64_t row = index != nullptr ? index[c] : c;
  row = row < 0 ? 0 : (row >= n ? n - 1 : row);  // clamped, as the CPU's Rows
  const int64_t at = row * blocks + b;
  Quants v;
  if constexpr (F == BlockFormat::kQ8_0) {
    v.lo = *reinterpret_cast<const uint4*>(quants + 32 * at);
    v.hi = *reinterpret_cast<const uint4*>(quants + 32 * at + 16);
  } else {
    v.lo = *reinterpret_cast<const uint4*>(quants + 16 * at);
  }
  float q[32];
  Unpack<F>(v, q);
  const float d = HalfBits(scales[at]);
  const float mn = F == BlockFormat::kQ4_1 ? HalfBits(mins[at]) : 0.0f;
  T* o = out + c * k + 32 * b;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float value = __fmul_rn(d, q[i]);
    Out<T>::Store(o + i, F == BlockFormat::kQ4_1 ? __fadd_rn(value, mn) : value);
  }
}

template <typename T>
void LaunchRowsTyped(const QuantWeightPlanes& w, int64_t n, int64_t k, const int64_t* index, int64_t count,
                     void* out, cudaStream_t s) {
  const int64_t threads = count * (k / 32);
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  const auto* q = static_cast<const uint8_t*>(w.quants);
  const auto* d = static_cast<const uint16_t*>(w.d);
  const auto* m = static_cast<const uint16_t*>(w.m);
  T* o = static_cast<T*>(out);
  switch (w.format) {
    case BlockFormat::kQ8_0:
      QuantRowsKernel<T, BlockFormat::kQ8_0><<<grid, 256, 0, s>>>(q, d, m, n, k, index, count, o);
      break;
    case BlockFormat::kQ4_0:
      QuantRowsKernel<T, BlockFormat::kQ4_0><<<grid, 256, 0, s>>>(q, d, m, n, k, index, count, o);
      break;
    default:
      QuantRowsKernel<T, BlockFormat::kQ4_1><<<grid, 256, 0, s>>>(q, d, m, n, k, index, count, o);
      break;
  }
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool PlanesOk(const QuantWeightPlanes& w) {
  const bool format =
      w.format == BlockFormat::kQ8_0 || w.format == BlockFormat::kQ4_0 || w.format == BlockFormat::kQ4_1;
  return format && Aligned(w.quants) && w.d != nullptr && (w.format != BlockFormat::kQ4_1 || w.m != nullptr);
}

}  // namespace

bool QuantGemvTakes(DType dtype, const QuantWeightPlanes& w, int64_t rows, int64_t k, const void* x,
                    int64_t x_stride) {
  const int64_t per_vec = dtype == DType::kF32 ? 4 : 8;
  return PlanesOk(w) && rows >= 1 && rows <= kGemvMaxRows && k > 0 && k % 32 == 0 &&
         x_stride % per_vec == 0 && Aligned(x);
}

const char* LaunchQuantGemv(DType dtype, GemvEpilogue epilogue, const void* x, int64_t x_stride,
                            const QuantWeightPlanes& w, const void* bias, void* y, int64_t y_stride,
                            int64_t rows, int64_t n, int64_t k, void* stream) {
  if (n <= 0) return nullptr;
  if (!QuantGemvTakes(dtype, w, rows, k, x, x_stride)) return "quant gemv: operands the kernel does not take";
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

const char* LaunchQuantRows(DType dtype, const QuantWeightPlanes& w, int64_t n, int64_t k,
                            const int64_t* index, int64_t count, void* out, void* stream) {
  if (count <= 0) return nullptr;
  if (!PlanesOk(w) || k <= 0 || k % 32 != 0 || n <= 0) return "quant rows: operands the kernel does not take";
  if ((count * (k / 32) + 255) / 256 > 0x7fffffff) return "quant rows: too many rows";
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == DType::kF32) {
    LaunchRowsTyped<float>(w, n, k, index, count, out, s);
  } else {
    LaunchRowsTyped<__nv_bfloat16>(w, n, k, index, count, out, s);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace shardlm::kernels::cuda
