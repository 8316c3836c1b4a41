// Which activations a quantized product should take (docs/quantized_weights.md):
// int8, quantized per block of 32 on the fly (what kernels/cpu/quant.h does,
// VPDPBUSD), or kept in bf16/f32 with the weight's nibbles unpacked to f32 in
// registers and multiplied by FMA (no rounding of the activations at all).
// Both read the same packed Q4_1 panels; one thread, so the figure is the
// kernel's own rate, over the SmolLM2 layer's shapes (gate/up 3072 x 576,
// down 576 x 1536), at 1, 2, 4 and 8 rows.
//
//   build/shardlm_quant_activations_bench [--reps N]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant.h"

namespace shardlm::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// The f32-activation kernel: rows [0, m) (m <= 8) against panels [0, panels).
template <int M>
void F32Panels(const uint8_t* w, int64_t panels, int64_t k, const float* x, float* y, int64_t n) {
  const int64_t blocks = k / kQuantBlock,
                bb = QuantPackedBytes(BlockFormat::kQ4_1, kQuantPanelRows, kQuantBlock);
  const __m512i low = _mm512_set1_epi32(0x0f);
  for (int64_t p = 0; p < panels; ++p) {
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    const uint8_t* panel = w + p * blocks * bb;
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* blk = panel + b * bb;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
      const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32)));
      const uint8_t* q = blk + 64;
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(q + 64 * c);
        for (int j = 0; j < 8; ++j) {  // byte j % 4 of each lane; j >= 4: the high nibbles
          const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(v, 8 * (j % 4) + 4 * (j / 4)), low);
          const __m512 wv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(nib), d, mn);
          const int64_t kk = b * kQuantBlock + 8 * c + j;
          for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[i * k + kk]), acc[i]);
        }
      }
    }
    const __mmask16 mask = static_cast<__mmask16>(n - p * 16 >= 16 ? 0xffff : (1u << (n - p * 16)) - 1);
    for (int i = 0; i < M; ++i) _mm512_mask_storeu_ps(y + i * n + p * 16, mask, acc[i]);
  }
}

void F32Product(int m, const uint8_t* w, int64_t panels, int64_t k, const float* x, float* y, int64_t n) {
  switch (m) {
    case 1:
      return F32Panels<1>(w, panels, k, x, y, n);
    case 2:
      return F32Panels<2>(w, panels, k, x, y, n);
    case 4:
      return F32Panels<4>(w, panels, k, x, y, n);
    default:
      return F32Panels<8>(w, panels, k, x, y, n);
  }
}

struct Shape {
  const char* name;
  int64_t n, k;
};

int Main(int argc, char** argv) {
  int reps = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  if (!HasAvx512Vnni()) {
    std::printf("this CPU has no AVX-512 VNNI: nothing to compare\n");
    return 0;
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::printf(
      "| shape | rows | int8 activations (VPDPBUSD) us | f32 activations (nibbles to f32, FMA) us | ratio "
      "|\n");
  std::printf("|---|---|---|---|---|\n");
  for (Shape s : {Shape{"gate/up 3072 x 576", 3072, 576}, Shape{"down 576 x 1536", 576, 1536}}) {
    const int64_t gb = BlockLayoutOf(BlockFormat::kQ4_1).bytes, blocks = s.k / kQuantBlock;
    std::vector<uint8_t> rows(s.n * blocks * gb);
    for (int64_t b = 0; b < s.n * blocks; ++b) {
      uint8_t* blk = rows.data() + b * gb;
      const uint16_t d = 0x2000, m = 0xa400;  // small f16 scale and negative minimum
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &m, 2);
      for (int j = 4; j < gb; ++j) blk[j] = static_cast<uint8_t>(byte(rng));
    }
    std::vector<uint8_t> packed(QuantPackedBytes(BlockFormat::kQ4_1, s.n, s.k));
    PackQuantWeight(BlockFormat::kQ4_1, rows.data(), s.n, s.k, packed.data());
    const int64_t panels = (s.n + kQuantPanelRows - 1) / kQuantPanelRows;
    for (int m : {1, 2, 4, 8}) {
      std::vector<float> x(m * s.k), y(m * s.n), dx(m * blocks);
      std::vector<int8_t> qx(m * s.k);
      std::vector<int32_t> sx(m * blocks), sx16(2 * m * blocks);
      for (float& v : x) v = g(rng);
      QuantArgs<float> a;
      a.format = BlockFormat::kQ4_1;
      a.a = {qx.data(), dx.data(), sx.data(), sx16.data()};
      a.w = packed.data();
      a.bias = nullptr;
      a.y = y.data();
      a.ldy = s.n;
      a.m = m;
      a.n = s.n;
      a.k = s.k;
      auto int8 = [&] {
        QuantizeActivationRows<float>(x.data(), s.k, s.k, 0, m, qx.data(), dx.data(), sx.data(), sx16.data());
        internal::QuantF32Vnni(a, 0, panels);
      };
      auto f32 = [&] { F32Product(m, packed.data(), panels, s.k, x.data(), y.data(), s.n); };
      double best[2] = {1e30, 1e30};
      for (int round = 0; round < 5; ++round) {
        for (int v = 0; v < 2; ++v) {
          const Clock::time_point t0 = Clock::now();
          for (int r = 0; r < reps; ++r) v == 0 ? int8() : f32();
          best[v] =
              std::min(best[v], std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps);
        }
      }
      std::printf("| %s | %d | %.1f | %.1f | %.2fx |\n", s.name, m, best[0], best[1], best[1] / best[0]);
    }
  }
  std::printf("\none thread, best of 5 rounds of %d calls; int8 includes quantizing the activations\n", reps);
  return 0;
}

}  // namespace
}  // namespace shardlm::kernels

int main(int argc, char** argv) { return shardlm::kernels::Main(argc, argv); }
