// The few-row products over GGUF blocks of kernels/cuda/quant_gemv.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gemv_finish.cuh"
#include "quant_block.h"
#include "quant_gemv.h"
#include "quant_planes.h"

namespace shardlm::kernels::cuda {
namespace {

constexpr int kWarps = 4;   // output columns per block
constexpr int kUnroll = 2;  // blocks of each weight row in flight per lane

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

// Block `at`'s quants and high bits, streamed (read once).
template <BlockFormat F>
__device__ __forceinline__ BlockBits LoadBits(const uint8_t* quants, const uint8_t* high, int64_t at) {
  BlockBits v;
  const uint4 a = LoadStreaming(quants + QuantBytes(F) * at);
  v.lo[0] = a.x, v.lo[1] = a.y, v.lo[2] = a.z, v.lo[3] = a.w;
  if constexpr (F == BlockFormat::kQ8_0) {
    const uint4 b = LoadStreaming(quants + 32 * at + 16);
    v.lo[4] = b.x, v.lo[5] = b.y, v.lo[6] = b.z, v.lo[7] = b.w;
  } else {
    v.lo[4] = v.lo[5] = v.lo[6] = v.lo[7] = 0;
  }
  v.hi[0] = v.hi[1] = 0;
  if constexpr (HighBytes(F) == 4) v.hi[0] = __ldg(reinterpret_cast<const unsigned*>(high) + at);
  if constexpr (HighBytes(F) == 8) {
    const uint2 h = __ldg(reinterpret_cast<const uint2*>(high) + at);
    v.hi[0] = h.x, v.hi[1] = h.y;
  }
  return v;
}

// A weight's planes as the kernels read them.
struct Planes {
  const uint8_t* quants;
  const uint8_t* high;
  const uint16_t* d;
  const uint16_t* m;
  const uint8_t* sc;
};

Planes PlanesFrom(const QuantWeightPlanes& w) {
  return {static_cast<const uint8_t*>(w.quants), static_cast<const uint8_t*>(w.high),
          static_cast<const uint16_t*>(w.d), static_cast<const uint16_t*>(w.m),
          static_cast<const uint8_t*>(w.sc)};
}

// Warp w of block b finishes column j = b * kWarps + w for all M rows. Lane
// l takes the weight's blocks l, l + 32, ...; the lanes' partial sums are
// combined by shuffles at the end, and lane m writes row m.
template <typename T, BlockFormat F, int M, GemvEpilogue E>
__global__ void __launch_bounds__(kWarps * 32)
    QuantGemvKernel(const T* __restrict__ x, int64_t x_stride, const Planes w, const T* __restrict__ bias,
                    T* __restrict__ y, int64_t y_stride, int64_t n, int64_t k) {
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
    BlockBits bits[kUnroll][R];
    BlockScales scale[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t at = row[r] * blocks + b;
        if (b < blocks) {
          bits[u][r] = LoadBits<F>(w.quants, w.high, at);
          scale[u][r] = ScalesAt<F>(w.d, w.m, w.sc, at);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t b = b0 + 32 * u;
      if (b >= blocks) break;
      float q[R][32];
#pragma unroll
      for (int r = 0; r < R; ++r) UnpackQuants<F>(bits[u][r], q[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xb[32];
        Act<T>::Block(x + m * x_stride + 32 * b, xb);
        float xsum = 0.0f;
        if constexpr (HasMinimum(F)) {
#pragma unroll
          for (int i = 0; i < 32; ++i) xsum += xb[i];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const BlockScales& s = scale[u][r];
          if constexpr (F == BlockFormat::kQ6_K) {  // a scale for each half of 16
            float first = 0.0f, second = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
              first = fmaf(xb[i], q[r][i], first);
              second = fmaf(xb[i + 16], q[r][i + 16], second);
            }
            acc[m][r] = fmaf(s.d1, second, fmaf(s.d0, first, acc[m][r]));
          } else {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; ++i) dot = fmaf(xb[i], q[r][i], dot);
            acc[m][r] = fmaf(s.d0, dot, acc[m][r]);
          }
          if constexpr (HasMinimum(F)) acc[m][r] = fmaf(s.mn, xsum, acc[m][r]);
        }
      }
    }
  }
  FinishColumn<T, M, R, E>(acc, lane, bias, y, y_stride, j);
}

template <typename T, BlockFormat F, int M>
void LaunchRows(GemvEpilogue e, const T* x, int64_t x_stride, const Planes& w, const T* bias, T* y,
                int64_t y_stride, int64_t n, int64_t k, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((n + kWarps - 1) / kWarps);
  switch (e) {
    case GemvEpilogue::kStore:
      QuantGemvKernel<T, F, M, GemvEpilogue::kStore>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kAddTo:
      QuantGemvKernel<T, F, M, GemvEpilogue::kAddTo>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, bias, y, y_stride, n, k);
      break;
    case GemvEpilogue::kSwiGlu:
      QuantGemvKernel<T, F, M, GemvEpilogue::kSwiGlu>
          <<<blocks, kWarps * 32, 0, s>>>(x, x_stride, w, nullptr, y, y_stride, n, k);
      break;
  }
}

template <typename T, BlockFormat F>
void LaunchFormat(GemvEpilogue e, const T* x, int64_t x_stride, const Planes& w, const T* bias, T* y,
                  int64_t y_stride, int64_t rows, int64_t n, int64_t k, cudaStream_t s) {
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

// Calls fn.template Run<F>() for the weight's format (one the planes take).
template <typename Fn>
void WithFormat(BlockFormat format, const Fn& fn) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return fn.template Run<BlockFormat::kQ8_0>();
    case BlockFormat::kQ4_0:
      return fn.template Run<BlockFormat::kQ4_0>();
    case BlockFormat::kQ4_1:
      return fn.template Run<BlockFormat::kQ4_1>();
    case BlockFormat::kQ5_0:
      return fn.template Run<BlockFormat::kQ5_0>();
    case BlockFormat::kQ5_1:
      return fn.template Run<BlockFormat::kQ5_1>();
    case BlockFormat::kQ4_K:
      return fn.template Run<BlockFormat::kQ4_K>();
    case BlockFormat::kQ5_K:
      return fn.template Run<BlockFormat::kQ5_K>();
    case BlockFormat::kQ6_K:
      return fn.template Run<BlockFormat::kQ6_K>();
    default:
      return;  // PlanesOk refused it
  }
}

// One launch of the product, for WithFormat.
template <typename T>
struct GemvLaunch {
  GemvEpilogue e;
  const T* x;
  int64_t x_stride;
  Planes w;
  const T* bias;
  T* y;
  int64_t y_stride, rows, n, k;
  cudaStream_t s;
  template <BlockFormat F>
  void Run() const {
    LaunchFormat<T, F>(e, x, x_stride, w, bias, y, y_stride, rows, n, k, s);
  }
};

template <typename T>
void LaunchTyped(GemvEpilogue e, const void* x, int64_t x_stride, const QuantWeightPlanes& w,
                 const void* bias, void* y, int64_t y_stride, int64_t rows, int64_t n, int64_t k,
                 cudaStream_t s) {
  const T* xt = static_cast<const T*>(x);
  const T* bt = static_cast<const T*>(bias);
  T* yt = static_cast<T*>(y);
  WithFormat(w.format, GemvLaunch<T>{e, xt, x_stride, PlanesFrom(w), bt, yt, y_stride, rows, n, k, s});
}

// Thread t dequantizes block t % (k / 32) of output row t / (k / 32).
template <typename T, BlockFormat F>
__global__ void QuantRowsKernel(const Planes w, int64_t n, int64_t k, const int64_t* __restrict__ index,
                                int64_t count, T* __restrict__ out) {
  const int64_t blocks = k / 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count * blocks) return;
  const int64_t c = t / blocks, b = t % blocks;
  int64_t row = index != nullptr ? index[c] : c;
  row = row < 0 ? 0 : (row >= n ? n - 1 : row);  // clamped, as the CPU's Rows
  const int64_t at = row * blocks + b;
  float q[32];
  UnpackQuants<F>(LoadBits<F>(w.quants, w.high, at), q);
  const BlockScales s = ScalesAt<F>(w.d, w.m, w.sc, at);
  T* o = out + c * k + 32 * b;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float value = __fmul_rn(i < 16 ? s.d0 : s.d1, q[i]);
    Out<T>::Store(o + i, HasMinimum(F) ? __fadd_rn(value, s.mn) : value);
  }
}

// One launch of the rows' dequantization, for WithFormat.
template <typename T>
struct RowsLaunch {
  Planes w;
  int64_t n, k;
  const int64_t* index;
  int64_t count;
  T* out;
  unsigned grid;
  cudaStream_t s;
  template <BlockFormat F>
  void Run() const {
    QuantRowsKernel<T, F><<<grid, 256, 0, s>>>(w, n, k, index, count, out);
  }
};

template <typename T>
void LaunchRowsTyped(const QuantWeightPlanes& w, int64_t n, int64_t k, const int64_t* index, int64_t count,
                     void* out, cudaStream_t s) {
  const int64_t threads = count * (k / 32);
  const unsigned grid = static_cast<unsigned>((threads + 255) / 256);
  WithFormat(w.format, RowsLaunch<T>{PlanesFrom(w), n, k, index, count, static_cast<T*>(out), grid, s});
}

bool Aligned(const void* p, uintptr_t to = 16) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// A format the planes take, with each plane it has (quant_planes.h), aligned for its loads.
bool PlanesOk(const QuantWeightPlanes& w) {
  const BlockFormat f = w.format;
  return GpuQuantFormat(f) && Aligned(w.quants) && w.d != nullptr && Aligned(w.d, 2) &&
         (!HasMinimum(f) || (w.m != nullptr && Aligned(w.m, 2))) &&
         (HighBytes(f) == 0 ||
          (w.high != nullptr && Aligned(w.high, static_cast<uintptr_t>(HighBytes(f))))) &&
         (!IsKQuant(f) || w.sc != nullptr);
}

// k fills the format's blocks (256 for the K-quants).
bool WholeBlocks(BlockFormat format, int64_t k) { return k > 0 && k % BlockLayoutOf(format).elements == 0; }

}  // namespace

bool QuantGemvTakes(DType dtype, const QuantWeightPlanes& w, int64_t rows, int64_t k, const void* x,
                    int64_t x_stride) {
  const int64_t per_vec = dtype == DType::kF32 ? 4 : 8;
  return PlanesOk(w) && rows >= 1 && rows <= kGemvMaxRows && WholeBlocks(w.format, k) &&
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
  if (!PlanesOk(w) || !WholeBlocks(w.format, k) || n <= 0)
    return "quant rows: operands the kernel does not take";
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
