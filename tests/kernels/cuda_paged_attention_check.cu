// kernels/cuda/paged_attention.cu against a double-precision host reference,
// standalone (no gtest): f32 and bf16, head sizes 32 to 256, GQA groups 1 to
// 16, sliding window on and off, in one batch of decode rows (one of ~3000
// keys) and prompt-chunk rows. Blocks are shuffled over the pool, table
// entries past a sequence or before every row's window are -1, and every
// slot no row may read holds NaN, so a wrong slot shows as a NaN output.
// Some tokens are not in `rows`: their output must stay untouched. Passing:
// max abs error 1e-4 for f32, 2e-2 of the largest reference output for bf16.
// Split-key cases run the kernel unsplit and split: both against the
// reference, and split against unsplit within f32 rounding.
//
//   nvcc -std=c++17 -O2 -arch=sm_90 -I. -o pa_check
//     tests/kernels/cuda_paged_attention_check.cu kernels/cuda/paged_attention.cu
//
// Exits 0 when every case passes, 1 when one fails, 77 (skip) without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/paged_attention.h"
#include "tests/kernels/cuda_check.h"

namespace {

using shardlm::kernels::cuda::DType;
using shardlm::kernels::cuda::LaunchPagedAttention;
using shardlm::kernels::cuda::PagedAttentionParams;
using shardlm::kernels::cuda::PagedAttentionSupports;

using shardlm::testing::FromBf16;
using shardlm::testing::ToBf16;

// Host arrays of f32 values, stored as the case's dtype on the device.
struct Stored {
  DType dtype;
  std::vector<float> f;  // the values as the kernel sees them (bf16-rounded for bf16)
  std::vector<uint8_t> bytes;
  void Set(size_t i, float x) {
    if (dtype == DType::kF32) {
      f[i] = x;
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    } else {
      const uint16_t b = ToBf16(x);
      f[i] = FromBf16(b);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
  }
  Stored(DType d, size_t n) : dtype(d), f(n), bytes(n * (d == DType::kF32 ? 4 : 2)) {
    for (size_t i = 0; i < n; ++i) Set(i, NAN);
  }
  float Get(const std::vector<uint8_t>& raw, size_t i) const {
    if (dtype == DType::kF32) {
      float x;
      std::memcpy(&x, raw.data() + 4 * i, 4);
      return x;
    }
    uint16_t b;
    std::memcpy(&b, raw.data() + 2 * i, 2);
    return FromBf16(b);
  }
};

void* Upload(const void* data, size_t bytes) {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 16)));
  CHECK_CUDA(cudaMemcpy(d, data, bytes, cudaMemcpyHostToDevice));
  return d;
}

struct Case {
  DType dtype;
  int head_dim, heads, kv_heads, window;
  int splits = 1;         // > 1: also run with split keys, against the reference and the unsplit output
  bool all_rows = false;  // every token, in order, given as rows = null
};

// A sequence in this step: `cached` earlier positions, then `fresh` new tokens
// (1 for a decode row), whose keys are already in the pool.
struct Seq {
  int cached, fresh;
};

// Runs one case; returns true when it passes.
bool RunCase(const Case& c, uint32_t seed) {
  const std::vector<Seq> seqs = {{2999, 1}, {0, 1}, {40, 1}, {17, 23}, {0, 37}, {200, 30}, {5, 1}};
  const int bs = 16, d = c.head_dim, heads = c.heads, kvh = c.kv_heads, group = heads / kvh;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);

  // Tokens of the step, sequence by sequence.
  std::vector<int32_t> positions, seq_of_token;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < seqs[s].fresh; ++i) {
      positions.push_back(seqs[s].cached + i);
      seq_of_token.push_back(static_cast<int32_t>(s));
    }
  }
  const int tokens = static_cast<int>(positions.size());

  // Block tables: shuffled pool blocks, -1 past the context and before the
  // first key any of the sequence's rows sees; spare pool blocks stay NaN.
  int max_blocks = 0, needed = 0;
  for (const Seq& s : seqs) max_blocks = std::max(max_blocks, (s.cached + s.fresh + bs - 1) / bs + 2);
  for (const Seq& s : seqs) needed += (s.cached + s.fresh + bs - 1) / bs;
  const int num_blocks = needed + 9;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> tables(seqs.size() * max_blocks, -1);
  int next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int ctx = seqs[s].cached + seqs[s].fresh;
    const int first = c.window > 0 ? std::max(0, seqs[s].cached - c.window + 1) : 0;
    for (int b = first / bs; b * bs < ctx; ++b) tables[s * max_blocks + b] = perm[next++];
  }
  auto slot_of = [&](int s, int j) { return int64_t{tables[s * max_blocks + j / bs]} * bs + j % bs; };

  const size_t row_elems = static_cast<size_t>(kvh) * d;
  Stored k(c.dtype, num_blocks * bs * row_elems), v(c.dtype, num_blocks * bs * row_elems);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int ctx = seqs[s].cached + seqs[s].fresh;
    const int first = c.window > 0 ? std::max(0, seqs[s].cached - c.window + 1) : 0;
    for (int j = first; j < ctx; ++j) {
      for (size_t i = 0; i < row_elems; ++i) {
        k.Set(slot_of(static_cast<int>(s), j) * row_elems + i, uni(rng));
        v.Set(slot_of(static_cast<int>(s), j) * row_elems + i, uni(rng));
      }
    }
  }
  // q as a view into a qkv projection [tokens, heads + 2 kv_heads, d]; the k and v parts are NaN.
  const int64_t q_row_stride = static_cast<int64_t>(heads + 2 * kvh) * d;
  Stored q(c.dtype, tokens * q_row_stride);
  for (int t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < int64_t{heads} * d; ++i) q.Set(t * q_row_stride + i, 2.0f * uni(rng));
  }
  // Rows to compute, in shuffled order; every fourth token of a chunk is left out.
  std::vector<int32_t> rows;
  for (int t = 0; t < tokens; ++t) {
    if (c.all_rows || seqs[seq_of_token[t]].fresh == 1 || t % 4 != 3) rows.push_back(t);
  }
  if (!c.all_rows) std::shuffle(rows.begin(), rows.end(), rng);
  Stored out(c.dtype, static_cast<size_t>(tokens) * heads * d);
  for (size_t i = 0; i < out.f.size(); ++i) out.Set(i, 1234.5f);  // sentinel for rows not computed

  PagedAttentionParams p;
  p.dtype = c.dtype;
  p.q = Upload(q.bytes.data(), q.bytes.size());
  p.q_row_stride = q_row_stride;
  p.q_head_stride = d;
  p.k = Upload(k.bytes.data(), k.bytes.size());
  p.v = Upload(v.bytes.data(), v.bytes.size());
  p.out = Upload(out.bytes.data(), out.bytes.size());
  p.rows = c.all_rows ? nullptr : static_cast<const int32_t*>(Upload(rows.data(), rows.size() * 4));
  p.positions = static_cast<const int32_t*>(Upload(positions.data(), positions.size() * 4));
  p.seq_of_token = static_cast<const int32_t*>(Upload(seq_of_token.data(), seq_of_token.size() * 4));
  p.block_tables = static_cast<const int32_t*>(Upload(tables.data(), tables.size() * 4));
  p.max_blocks = max_blocks;
  // Odd seeds give the stride on the device, as a CUDA graph does, with
  // max_blocks only a bound above it: a kernel that used max_blocks as the
  // stride would read other sequences' entries.
  const int32_t stride = max_blocks;
  if (seed % 2 == 1) {
    p.block_table_stride = static_cast<const int32_t*>(Upload(&stride, 4));
    p.max_blocks = max_blocks + 7;
  }
  p.block_size = bs;
  p.num_rows = static_cast<int32_t>(rows.size());
  p.heads = heads;
  p.kv_heads = kvh;
  p.head_dim = d;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.sliding_window = c.window;
  // One launch with `splits` (a fresh sentinel-filled output each time); its output bytes.
  auto launch = [&](int splits, std::vector<uint8_t>& got) {
    CHECK_CUDA(cudaMemcpy(p.out, out.bytes.data(), out.bytes.size(), cudaMemcpyHostToDevice));
    p.num_splits = splits;
    p.split_workspace = nullptr;
    const int64_t ws = shardlm::kernels::cuda::PagedAttentionWorkspaceFloats(p);
    if (ws > 0) CHECK_CUDA(cudaMalloc(&p.split_workspace, ws * sizeof(float)));
    const char* err = LaunchPagedAttention(p, nullptr);
    if (err != nullptr) std::printf("launch failed (num_splits %d): %s\n", splits, err);
    CHECK_CUDA(cudaDeviceSynchronize());
    if (p.split_workspace != nullptr) CHECK_CUDA(cudaFree(p.split_workspace));
    got.resize(out.bytes.size());
    CHECK_CUDA(cudaMemcpy(got.data(), p.out, got.size(), cudaMemcpyDeviceToHost));
    return err == nullptr;
  };
  std::vector<uint8_t> got, split_got;
  if (!launch(1, got) || (c.splits > 1 && !launch(c.splits, split_got))) return false;
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.out), static_cast<const void*>(p.rows),
                          static_cast<const void*>(p.positions), static_cast<const void*>(p.seq_of_token),
                          static_cast<const void*>(p.block_tables)}) {
    CHECK_CUDA(cudaFree(const_cast<void*>(ptr)));
  }
  if (p.block_table_stride != nullptr) CHECK_CUDA(cudaFree(const_cast<int32_t*>(p.block_table_stride)));

  // Reference: softmax in double over the row's keys, from the stored values.
  double max_err = 0.0, max_ref = 0.0, split_diff = 0.0;
  std::vector<double> w;
  std::vector<bool> computed(tokens, false);
  for (int32_t t : rows) computed[t] = true;
  for (int t : rows) {
    const int s = seq_of_token[t], pos = positions[t];
    const int first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    for (int h = 0; h < heads; ++h) {
      const int g = h / group;
      const float* qh = q.f.data() + t * q_row_stride + int64_t{h} * d;
      w.assign(pos - first + 1, 0.0);
      double mx = -INFINITY, sum = 0.0;
      for (int j = first; j <= pos; ++j) {
        const float* kj = k.f.data() + (slot_of(s, j) * kvh + g) * d;
        double dot = 0.0;
        for (int i = 0; i < d; ++i) dot += double{qh[i]} * kj[i];
        w[j - first] = dot * p.scale;
        mx = std::max(mx, w[j - first]);
      }
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int i = 0; i < d; ++i) {
        double ref = 0.0;
        for (int j = first; j <= pos; ++j) ref += w[j - first] * v.f[(slot_of(s, j) * kvh + g) * d + i];
        ref /= sum;
        const size_t at = (static_cast<size_t>(t) * heads + h) * d + i;
        const double o = out.Get(got, at);
        const double err = std::fabs(o - ref);
        max_err = std::isnan(err) ? INFINITY : std::max(max_err, err);
        if (c.splits > 1) {
          const double so = out.Get(split_got, at);
          const double serr = std::fabs(so - ref), sdiff = std::fabs(so - o);
          max_err = std::isnan(serr) ? INFINITY : std::max(max_err, serr);
          split_diff = std::isnan(sdiff) ? INFINITY : std::max(split_diff, sdiff);
        }
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
  }
  // Rows not in `rows` keep the sentinel bit for bit.
  size_t touched = 0;
  const size_t esize = c.dtype == DType::kF32 ? 4 : 2, row_bytes = static_cast<size_t>(heads) * d * esize;
  for (int t = 0; t < tokens; ++t) {
    const size_t at = t * row_bytes;
    if (!computed[t] && std::memcmp(got.data() + at, out.bytes.data() + at, row_bytes) != 0) ++touched;
    if (!computed[t] && c.splits > 1 &&
        std::memcmp(split_got.data() + at, out.bytes.data() + at, row_bytes) != 0) {
      ++touched;
    }
  }
  const bool f32 = c.dtype == DType::kF32;
  const double tol = f32 ? 1e-4 : 2e-2 * max_ref;
  // Split and unsplit differ by f32 rounding alone: far below 1e-5 in f32; in bf16, one rounding
  // of the output (2^-8 relative) where the f32 values straddle a bf16 boundary.
  const double split_tol = f32 ? 1e-5 : std::ldexp(max_ref, -7);
  const bool ok = max_err <= tol && touched == 0 && split_diff <= split_tol;
  std::printf("%s %-4s d=%-3d heads=%-2d kv=%d window=%-4d rows=%zu%s%s  max abs err %.3g (tol %.3g)",
              ok ? "ok  " : "FAIL", f32 ? "f32" : "bf16", d, heads, kvh, c.window, rows.size(),
              c.all_rows ? " (null)" : "", seed % 2 == 1 ? " stride on device" : "", max_err, tol);
  if (c.splits > 1)
    std::printf("  splits %d: |split - unsplit| %.3g (tol %.3g)", c.splits, split_diff, split_tol);
  std::printf("%s\n", touched ? "  rows outside `rows` written" : "");
  return ok;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "count 0");
    return 77;
  }
  bool ok = PagedAttentionSupports(64) && PagedAttentionSupports(128) && !PagedAttentionSupports(80);
  PagedAttentionParams bad;
  bad.num_rows = 1;
  bad.heads = 6;
  bad.kv_heads = 4;
  ok = ok && LaunchPagedAttention(bad, nullptr) != nullptr;  // heads not a multiple of kv_heads
  if (!ok) std::printf("FAIL PagedAttentionSupports or parameter checks\n");

  std::vector<Case> cases;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int d : {64, 128}) {
      for (int ratio : {1, 4, 8}) {
        for (int window : {0, 50}) cases.push_back({dt, d, 2 * ratio, 2, window});
      }
    }
    for (int d : {32, 96, 256}) cases.push_back({dt, d, 8, 2, 0});
    cases.push_back({dt, 128, 16, 1, 0});  // group 16: two passes of 8 heads
    cases.push_back({dt, 64, 12, 2, 50});  // group 6: heads past the group in a block of 8
    cases.push_back({dt, 64, 4, 4, 1});    // window 1: each row sees only itself
    // Split keys: the 3000-key row in 8 and in 32 runs (GQA 1, 4 and 8), with a window of 1000
    // (runs start past the window), and with every row too short to split but one.
    for (int ratio : {1, 4, 8}) cases.push_back({dt, 128, 2 * ratio, 2, 0, 8});
    cases.push_back({dt, 128, 8, 2, 0, 32});
    cases.push_back({dt, 64, 8, 2, 1000, 8});
    cases.push_back({dt, 128, 16, 1, 0, 5});  // group 16: two passes, 5 runs (600 keys each)
    cases.push_back({dt, 128, 8, 2, 0, 8, /*all_rows=*/true});  // rows = null: every token
  }
  uint32_t seed = 1;
  for (const Case& c : cases) ok = RunCase(c, seed++) && ok;
  std::printf("%s\n", ok ? "all cases passed" : "SOME CASES FAILED");
  return ok ? 0 : 1;
}
