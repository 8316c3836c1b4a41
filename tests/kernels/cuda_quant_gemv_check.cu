// kernels/cuda/quant_gemv.cu against a double-precision host reference,
// standalone (no gtest; docs/gpu_quantized.md): random GGUF blocks of every
// format the planes take (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K;
// scales of both signs, minimums) repacked into planes by
// kernels/cuda/quant_planes.h, multiplied by 1 to 8 rows of x in f32 and
// bf16 with each epilogue (store with a bias, add to y with one, SwiGLU of a [gate;
// up] weight), on shapes whose columns do not fill the last block of warps.
// The reference weights are the file's dequantization (formats/quant_blocks.h,
// bit for bit gguf-py's). Passing: within 1e-4 (f32) or 1e-2 (bf16) of the
// largest reference output. LaunchQuantRows (a tied embedding's lookups,
// prompt chunks' weights) must give those weights exactly (f32) or rounded
// once (bf16).
//
//   cuda_quant_gemv_check [--time]
//
// --time also times batch 1 to 8 on the Llama-3-8B shape's projections in
// Q4_0, Q4_K, Q6_K and Q8_0 against a read-only probe of the device's
// bandwidth over the bytes the planes hold (the target: 1.4x that floor at
// batch 1).
// Exits 0 when every case passes, 1 when one fails, 77 (skip) without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/quant_blocks.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_planes.h"
#include "tests/kernels/cuda_check.h"

namespace {

using shardlm::BlockFormat;
using shardlm::BlockFormatName;
using shardlm::BlockLayoutOf;
using shardlm::HalfFieldOffsets;
using shardlm::kernels::IsKQuant;
using namespace shardlm::kernels::cuda;  // NOLINT: the kernels under test

using shardlm::testing::FromBf16;
using shardlm::testing::ToBf16;

// A random f16 scale of either sign between 2^-9 and 2^-5.
uint16_t RandomScale(std::mt19937& rng) {
  const uint16_t sign = static_cast<uint16_t>(rng() % 2) << 15;
  const uint16_t exp = static_cast<uint16_t>(6 + rng() % 4) << 10;
  return static_cast<uint16_t>(sign | exp | (rng() % 1024));
}

// n rows of k weights in random GGUF blocks of `format`.
std::vector<uint8_t> RandomBlocks(BlockFormat format, int64_t n, int64_t k, std::mt19937& rng) {
  const shardlm::BlockLayout layout = BlockLayoutOf(format);
  const int64_t blocks = n * (k / layout.elements);
  std::vector<uint8_t> out(static_cast<size_t>(blocks * layout.bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  for (int64_t b = 0; b < blocks; ++b) {
    for (int off : HalfFieldOffsets(format)) {
      const uint16_t h = RandomScale(rng);
      std::memcpy(out.data() + b * layout.bytes + off, &h, 2);
    }
  }
  return out;
}

// The weights as the file's dequantization gives them, f32[n, k].
std::vector<float> Dequantize(BlockFormat format, const std::vector<uint8_t>& rows, int64_t n, int64_t k) {
  const shardlm::BlockLayout layout = BlockLayoutOf(format);
  const int64_t row_bytes = k / layout.elements * layout.bytes;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    shardlm::DequantizeBlocks(format, rows.data() + r * row_bytes, k, w.data() + r * k);
  return w;
}

// The planes on the device, and their pointers.
struct DevicePlanes {
  uint8_t* bytes = nullptr;
  QuantWeightPlanes w;
  int64_t size = 0;
};

DevicePlanes Upload(BlockFormat format, const std::vector<uint8_t>& rows, int64_t n, int64_t k) {
  const QuantPlanes p = QuantPlanesOf(format, n, k);
  std::vector<uint8_t> host(static_cast<size_t>(p.bytes));
  RepackToPlanes(format, rows.data(), n, k, host.data());
  DevicePlanes d;
  d.size = p.bytes;
  CHECK_CUDA(cudaMalloc(&d.bytes, static_cast<size_t>(p.bytes)));
  CHECK_CUDA(cudaMemcpy(d.bytes, host.data(), host.size(), cudaMemcpyHostToDevice));
  auto at = [&](int64_t offset) -> const void* { return offset >= 0 ? d.bytes + offset : nullptr; };
  d.w.format = format;
  d.w.quants = at(p.quants);
  d.w.high = at(p.high);
  d.w.d = at(p.d);
  d.w.m = at(p.m);
  d.w.sc = at(p.sc);
  return d;
}

// x rows as the kernel reads them (bf16 bits, or f32) and as doubles.
struct Rows {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<double> value;  // what the kernel sees (bf16-rounded in bf16)
};

Rows RandomRows(DType dtype, int64_t count, int64_t len, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Rows r;
  for (int64_t i = 0; i < count * len; ++i) {
    const float v = u(rng);
    r.f32.push_back(v);
    r.bf16.push_back(ToBf16(v));
    r.value.push_back(dtype == DType::kF32 ? v : FromBf16(ToBf16(v)));
  }
  return r;
}

double Round(DType dtype, double v) {
  return dtype == DType::kF32 ? static_cast<float>(v) : FromBf16(ToBf16(static_cast<float>(v)));
}

// One product through the kernel against the host's; prints and returns whether it passed.
bool CheckProduct(BlockFormat format, DType dtype, GemvEpilogue epilogue, int64_t rows, int64_t n, int64_t k,
                  std::mt19937& rng) {
  const int64_t wrows = epilogue == GemvEpilogue::kSwiGlu ? 2 * n : n;
  const std::vector<uint8_t> blocks = RandomBlocks(format, wrows, k, rng);
  const std::vector<float> w = Dequantize(format, blocks, wrows, k);
  DevicePlanes planes = Upload(format, blocks, wrows, k);
  const size_t es = dtype == DType::kF32 ? 4 : 2;
  const Rows x = RandomRows(dtype, rows, k, rng);
  const Rows bias = RandomRows(dtype, 1, n, rng);
  const Rows y0 = RandomRows(dtype, rows, n, rng);
  const bool with_bias = epilogue != GemvEpilogue::kSwiGlu;  // SwiGLU takes none
  void *dx, *db, *dy;
  CHECK_CUDA(cudaMalloc(&dx, rows * k * es));
  CHECK_CUDA(cudaMalloc(&db, n * es));
  CHECK_CUDA(cudaMalloc(&dy, rows * n * es));
  auto put = [&](void* dst, const Rows& r) {
    const void* src = dtype == DType::kF32 ? static_cast<const void*>(r.f32.data()) : r.bf16.data();
    CHECK_CUDA(cudaMemcpy(dst, src, r.value.size() * es, cudaMemcpyHostToDevice));
  };
  put(dx, x);
  put(db, bias);
  put(dy, y0);
  const char* err =
      LaunchQuantGemv(dtype, epilogue, dx, k, planes.w, with_bias ? db : nullptr, dy, n, rows, n, k, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> got(static_cast<size_t>(rows * n));
  if (dtype == DType::kF32) {
    std::vector<float> h(got.size());
    CHECK_CUDA(cudaMemcpy(h.data(), dy, h.size() * 4, cudaMemcpyDeviceToHost));
    std::copy(h.begin(), h.end(), got.begin());
  } else {
    std::vector<uint16_t> h(got.size());
    CHECK_CUDA(cudaMemcpy(h.data(), dy, h.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); ++i) got[i] = FromBf16(h[i]);
  }
  double worst = 0, largest = 1e-30;
  std::vector<double> want(got.size());
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < n; ++j) {
      auto dot = [&](int64_t wr) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += x.value[m * k + i] * static_cast<double>(w[wr * k + i]);
        return s;
      };
      double v;
      if (epilogue == GemvEpilogue::kSwiGlu) {
        const double g = Round(dtype, dot(j)), u = Round(dtype, dot(n + j));
        v = Round(dtype, g / (1.0 + std::exp(-g))) * u;
      } else {
        const double p = Round(dtype, dot(j) + (with_bias ? bias.value[j] : 0.0));
        v = epilogue == GemvEpilogue::kAddTo ? y0.value[m * n + j] + p : p;
      }
      want[m * n + j] = v;
      largest = std::max(largest, std::fabs(v));
    }
  }
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  const double tol = (dtype == DType::kF32 ? 1e-4 : 1e-2) * largest;
  const bool ok = err == nullptr && worst <= tol;
  const char* names[] = {"store+bias", "add+bias", "swiglu"};
  std::printf("%s %s %-10s rows %d n %lld k %lld: max error %.3g (tolerance %.3g)%s%s\n",
              ok ? "ok  " : "FAIL", BlockFormatName(format), names[static_cast<int>(epilogue)],
              static_cast<int>(rows), static_cast<long long>(n), static_cast<long long>(k), worst, tol,
              err != nullptr ? ": " : "", err != nullptr ? err : "");
  CHECK_CUDA(cudaFree(dx));
  CHECK_CUDA(cudaFree(db));
  CHECK_CUDA(cudaFree(dy));
  CHECK_CUDA(cudaFree(planes.bytes));
  return ok;
}

// LaunchQuantRows against the host's dequantization, for some rows (one out of range: clamped).
bool CheckRows(BlockFormat format, DType dtype, std::mt19937& rng) {
  const int64_t n = 77, k = 256;
  const std::vector<uint8_t> blocks = RandomBlocks(format, n, k, rng);
  const std::vector<float> w = Dequantize(format, blocks, n, k);
  DevicePlanes planes = Upload(format, blocks, n, k);
  const std::vector<int64_t> index = {5, 0, 76, 31, 200};
  int64_t* di;
  void* dout;
  const size_t es = dtype == DType::kF32 ? 4 : 2;
  CHECK_CUDA(cudaMalloc(&di, index.size() * 8));
  CHECK_CUDA(cudaMalloc(&dout, index.size() * k * es));
  CHECK_CUDA(cudaMemcpy(di, index.data(), index.size() * 8, cudaMemcpyHostToDevice));
  const char* err =
      LaunchQuantRows(dtype, planes.w, n, k, di, static_cast<int64_t>(index.size()), dout, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  int64_t wrong = 0;
  std::vector<float> f(index.size() * k);
  std::vector<uint16_t> b(index.size() * k);
  if (dtype == DType::kF32) {
    CHECK_CUDA(cudaMemcpy(f.data(), dout, f.size() * 4, cudaMemcpyDeviceToHost));
  } else {
    CHECK_CUDA(cudaMemcpy(b.data(), dout, b.size() * 2, cudaMemcpyDeviceToHost));
  }
  for (size_t c = 0; c < index.size(); ++c) {
    const int64_t row = std::min<int64_t>(index[c], n - 1);
    for (int64_t i = 0; i < k; ++i) {
      const float want = w[row * k + i];
      const bool same = dtype == DType::kF32 ? f[c * k + i] == want : b[c * k + i] == ToBf16(want);
      wrong += same ? 0 : 1;
    }
  }
  const bool ok = err == nullptr && wrong == 0;
  std::printf("%s %s rows %s: %lld of %lld values differ from the host's%s%s\n", ok ? "ok  " : "FAIL",
              BlockFormatName(format), dtype == DType::kF32 ? "f32" : "bf16", static_cast<long long>(wrong),
              static_cast<long long>(index.size() * k), err != nullptr ? ": " : "",
              err != nullptr ? err : "");
  CHECK_CUDA(cudaFree(di));
  CHECK_CUDA(cudaFree(dout));
  CHECK_CUDA(cudaFree(planes.bytes));
  return ok;
}

// A read-only pass over `bytes`: each thread sums 16-byte words (the floor's probe).
__global__ void ReadAll(const uint4* p, int64_t words, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;  // keeps the loads
}

double ReadBandwidth() {
  const int64_t bytes = int64_t{1} << 30;
  void* buf;
  unsigned* sink;
  CHECK_CUDA(cudaMalloc(&buf, bytes));
  CHECK_CUDA(cudaMalloc(&sink, 4));
  CHECK_CUDA(cudaMemset(buf, 1, bytes));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  ReadAll<<<1024, 256>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  CHECK_CUDA(cudaEventRecord(a));
  for (int i = 0; i < 10; ++i) ReadAll<<<1024, 256>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  CHECK_CUDA(cudaFree(buf));
  CHECK_CUDA(cudaFree(sink));
  return 10.0 * bytes / (ms / 1e3);
}

// A decode step's projections of the Llama-3-8B shape (one layer), batch 1 to 8, in `format`.
void TimeShape(BlockFormat format, double bandwidth, std::mt19937& rng) {
  struct Shape {
    const char* name;
    int64_t n, k;
    GemvEpilogue e;
  };
  const Shape shapes[] = {{"qkv 6144x4096", 6144, 4096, GemvEpilogue::kStore},
                          {"o 4096x4096", 4096, 4096, GemvEpilogue::kAddTo},
                          {"gate/up 2x14336x4096", 14336, 4096, GemvEpilogue::kSwiGlu},
                          {"down 4096x14336", 4096, 14336, GemvEpilogue::kAddTo}};
  for (const Shape& s : shapes) {
    const int64_t wrows = s.e == GemvEpilogue::kSwiGlu ? 2 * s.n : s.n;
    const std::vector<uint8_t> blocks = RandomBlocks(format, wrows, s.k, rng);
    DevicePlanes planes = Upload(format, blocks, wrows, s.k);
    void *dx, *dy;
    CHECK_CUDA(cudaMalloc(&dx, 8 * s.k * 2));
    CHECK_CUDA(cudaMalloc(&dy, 8 * s.n * 2));
    CHECK_CUDA(cudaMemset(dx, 0, 8 * s.k * 2));
    CHECK_CUDA(cudaMemset(dy, 0, 8 * s.n * 2));
    const double floor_us = planes.size / bandwidth * 1e6;
    for (int rows = 1; rows <= 8; rows *= 2) {
      cudaEvent_t a, b;
      CHECK_CUDA(cudaEventCreate(&a));
      CHECK_CUDA(cudaEventCreate(&b));
      LaunchQuantGemv(DType::kBF16, s.e, dx, s.k, planes.w, nullptr, dy, s.n, rows, s.n, s.k, nullptr);
      CHECK_CUDA(cudaEventRecord(a));
      for (int i = 0; i < 50; ++i)
        LaunchQuantGemv(DType::kBF16, s.e, dx, s.k, planes.w, nullptr, dy, s.n, rows, s.n, s.k, nullptr);
      CHECK_CUDA(cudaEventRecord(b));
      CHECK_CUDA(cudaEventSynchronize(b));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
      const double us = ms * 1e3 / 50;
      std::printf("time %s %-22s bf16 rows %d: %8.1f us, %6.0f GB/s, %.2fx the read floor (%.1f us)\n",
                  BlockFormatName(format), s.name, rows, us, planes.size / (us * 1e3), us / floor_us,
                  floor_us);
    }
    CHECK_CUDA(cudaFree(dx));
    CHECK_CUDA(cudaFree(dy));
    CHECK_CUDA(cudaFree(planes.bytes));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  const bool time = argc > 1 && std::string(argv[1]) == "--time";
  std::mt19937 rng(7);
  bool ok = true;
  const BlockFormat formats[] = {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1,
                                 BlockFormat::kQ5_0, BlockFormat::kQ5_1, BlockFormat::kQ4_K,
                                 BlockFormat::kQ5_K, BlockFormat::kQ6_K};
  for (const BlockFormat format : formats) {
    const int64_t short_k = IsKQuant(format) ? 256 : 96;  // one K-quant super-block; three blocks of 32
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t rows = 1; rows <= 8; ++rows) {  // every M the kernel is built for
        ok &= CheckProduct(format, dtype, GemvEpilogue::kStore, rows, 301, 4096, rng);
        ok &= CheckProduct(format, dtype, GemvEpilogue::kAddTo, rows, 130, short_k, rng);
        ok &= CheckProduct(format, dtype, GemvEpilogue::kSwiGlu, rows, 203, 1024, rng);
      }
      ok &= CheckRows(format, dtype, rng);
    }
  }
  if (time) {
    const double bandwidth = ReadBandwidth();
    std::printf("read-only probe: %.0f GB/s\n", bandwidth / 1e9);
    for (const BlockFormat format :
         {BlockFormat::kQ4_0, BlockFormat::kQ4_K, BlockFormat::kQ6_K, BlockFormat::kQ8_0})
      TimeShape(format, bandwidth, rng);
  }
  std::printf("%s\n", ok ? "all cases pass" : "FAILED");
  return ok ? 0 : 1;
}
