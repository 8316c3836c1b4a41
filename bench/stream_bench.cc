// How fast this machine streams a model's weights with each access pattern a
// decode kernel could use: the evidence behind docs/benchmarks.md's account of
// why a batch-8 step costs more than a batch-1 step on the development VM.
//
// One buffer of --mb MB (default: the benchmark model's f32 weights), split
// between the threads; each pattern reads all of it, the patterns alternate,
// and the medians of --reps runs are printed:
//   - plain reads, 1 or 4 sequential streams per thread, with and without a
//     software prefetch ahead;
//   - the packed kernels' tiles (kernels/cpu/packed_avx512.cc): 1 row over 4
//     panels of 48 outputs, 8 rows over 1 panel;
//   - an 8-row tile over 3 panels of 16 outputs: 3 streams per thread for the
//     same 24 accumulators, a layout the kernels could have used instead.
//
//   build/shardlm_stream_bench [--mb 402] [--reps 9]
//
// Plain C++ with OpenMP and AVX-512 intrinsics, no torch: only the access
// patterns differ between rows of the table.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kK = 768;  // steps per panel: the benchmark model's hidden size
constexpr int kRows = 8;
float g_x[kRows][kK];  // activation rows
float g_sink = 0;

// The sum of v's lanes (not _mm512_reduce_add_ps, whose GCC 12 header trips
// -Wuninitialized under a target attribute).
__attribute__((target("avx512f"))) inline float Sum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

__attribute__((target("avx512f"))) inline void Prefetch(const float* p, int ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T0);
}

// Plain reads of [p, p + n): `streams` equal parts read in lockstep, 64 bytes
// of each per step, optionally prefetched `ahead` bytes ahead.
__attribute__((target("avx512f"))) float Read(const float* p, size_t n, int streams, int ahead) {
  const size_t per = n / streams / 16 * 16;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (size_t i = 0; i < per; i += 16) {
    for (int s = 0; s < streams; ++s) {
      const float* q = p + s * per + i;
      if (ahead > 0) Prefetch(q, ahead);
      acc[s] = _mm512_add_ps(acc[s], _mm512_load_ps(q));
    }
  }
  return Sum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// The packed kernels' 1-row tile: 4 panels of [kK][48] at once, 12 chains.
__attribute__((target("avx512f"))) float Row1Panels4(const float* w) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int s = 0; s < kK; ++s) {
    const __m512 x = _mm512_set1_ps(g_x[0][s]);
#pragma GCC unroll 12
    for (int u = 0; u < 12; ++u) {
      const float* q = w + (u / 3) * kK * 48 + s * 48 + (u % 3) * 16;
      Prefetch(q, 4096);
      acc[u] = _mm512_fmadd_ps(_mm512_load_ps(q), x, acc[u]);
    }
  }
  __m512 t = acc[0];
  for (int u = 1; u < 12; ++u) t = _mm512_add_ps(t, acc[u]);
  return Sum(t);
}

// 8 rows x 24 accumulators: three weight vectors a step, from one 48-wide
// panel (w1 = w0 + 16, w2 = w0 + 32, stride 48) or three 16-wide panels
// (stride 16 each).
__attribute__((target("avx512f"))) float Rows8(const float* w0, const float* w1, const float* w2,
                                               int stride) {
  __m512 acc[kRows][3];
  for (auto& r : acc)
    for (auto& a : r) a = _mm512_setzero_ps();
  for (int s = 0; s < kK; ++s) {
    const float *p0 = w0 + s * stride, *p1 = w1 + s * stride, *p2 = w2 + s * stride;
    Prefetch(p0, 16384);
    Prefetch(p1, 16384);
    Prefetch(p2, 16384);
    __m512 a = _mm512_load_ps(p0), b = _mm512_load_ps(p1), c = _mm512_load_ps(p2);
    __asm__("" : "+v"(a), "+v"(b), "+v"(c));  // as the kernel: loads kept out of the FMAs
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m512 x = _mm512_set1_ps(g_x[i][s]);
      acc[i][0] = _mm512_fmadd_ps(a, x, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, x, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(c, x, acc[i][2]);
    }
  }
  __m512 t = _mm512_setzero_ps();
  for (auto& r : acc) t = _mm512_add_ps(t, _mm512_add_ps(r[0], _mm512_add_ps(r[1], r[2])));
  return Sum(t);
}

struct Pattern {
  const char* name;
  int id;
};

// Seconds for one pass of pattern `id` over buf[0, n) on every thread.
double RunPattern(const float* buf, size_t n, int id) {
  const double t0 = omp_get_wtime();
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    const size_t block = size_t{4} * kK * 48;  // 4 panels of 48 = 12 panels of 16
    const size_t blocks = n / block;
    const size_t b0 = blocks * t / threads, b1 = blocks * (t + 1) / threads;
    const float* mine = buf + b0 * block;
    const size_t len = (b1 - b0) * block;
    switch (id) {
      case 0:
        total += Read(mine, len, 1, 0);
        break;
      case 1:
        total += Read(mine, len, 1, 16384);
        break;
      case 2:
        total += Read(mine, len, 4, 0);
        break;
      case 3:
        total += Read(mine, len, 4, 1024);
        break;
      case 4:
        for (size_t b = b0; b < b1; ++b) total += Row1Panels4(buf + b * block);
        break;
      default:
        // Per 48 outputs: one panel of 48 (5), or three panels of 16 (6).
        for (size_t p = b0 * 4; p < b1 * 4; ++p) {
          const float* w = buf + p * kK * 48;
          total += id == 5 ? Rows8(w, w + 16, w + 32, 48) : Rows8(w, w + kK * 16, w + 2 * kK * 16, 16);
        }
        break;
    }
  }
  g_sink += total;
  return omp_get_wtime() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  int mb = 402, reps = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb") {
      mb = std::atoi(argv[i + 1]);
    } else if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--mb 402] [--reps 9]\n", argv[0]);
      return 2;
    }
  }
  if (argc % 2 == 0 || mb < 16 || mb > 65536 || reps < 1 || reps > 1000) {
    std::fprintf(stderr, "usage: %s [--mb 16..65536] [--reps 1..1000]\n", argv[0]);
    return 2;
  }
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("this CPU has no AVX-512: the patterns measured here are the AVX-512 kernels'\n");
    return 0;
  }
  const size_t n = (static_cast<size_t>(mb) << 20) / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
  std::memset(buf, 0, n * sizeof(float));
  for (int i = 0; i < kRows; ++i)
    for (int k = 0; k < kK; ++k) g_x[i][k] = 0.001f * static_cast<float>(k + i);
  const Pattern patterns[] = {{"read, 1 stream a thread", 0},
                              {"read, 1 stream a thread, prefetch 16 KB ahead", 1},
                              {"read, 4 streams a thread", 2},
                              {"read, 4 streams a thread, prefetch 1 KB ahead", 3},
                              {"1 row x 4 panels of 48 (the kernel's tile)", 4},
                              {"8 rows x 1 panel of 48 (the kernel's tile)", 5},
                              {"8 rows x 3 panels of 16 (3 streams)", 6}};
  constexpr int kPatterns = sizeof(patterns) / sizeof(patterns[0]);
  std::vector<std::vector<double>> secs(kPatterns);
  for (int p = 0; p < kPatterns; ++p) RunPattern(buf, n, patterns[p].id);  // warm-up
  for (int r = 0; r < reps; ++r)
    for (int p = 0; p < kPatterns; ++p) secs[p].push_back(RunPattern(buf, n, patterns[p].id));
  std::printf("%d threads, %d MB, medians of %d alternating runs\n\n", omp_get_max_threads(), mb, reps);
  std::printf("| pattern | ms | GB/s |\n|---|---|---|\n");
  for (int p = 0; p < kPatterns; ++p) {
    std::sort(secs[p].begin(), secs[p].end());
    const double med = secs[p][secs[p].size() / 2];
    std::printf("| %s | %.2f | %.1f |\n", patterns[p].name, med * 1e3, n * sizeof(float) / med / 1e9);
  }
  std::free(buf);
  return g_sink == 12345.0f ? 1 : 0;
}
