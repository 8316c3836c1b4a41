#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/fused.h"

namespace shardlm {
namespace {

// Dense causal attention of one sequence, the plain way.
// q: f32[len, heads, d], k/v: f32[len, kv_heads, d] -> f32[len, heads, d]
at::Tensor DenseAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  const int64_t len = q.size(0), heads = q.size(1), d = q.size(2), group = heads / k.size(1);
  at::Tensor kk = k.repeat_interleave(group, 1), vv = v.repeat_interleave(group, 1);
  at::Tensor scores = at::einsum("qhd,khd->hqk", {q, kk}) / std::sqrt(static_cast<double>(d));
  at::Tensor mask = at::ones({len, len}, at::kBool).tril();
  if (window > 0) mask = mask.logical_and(at::ones({len, len}, at::kBool).triu(-(window - 1)));
  scores = scores.masked_fill(mask.logical_not(), -INFINITY);
  return at::einsum("hqk,khd->qhd", {scores.softmax(-1), vv});
}

struct Case {
  int64_t heads, kv_heads, window;
  at::ScalarType dtype;
  double tol;
};

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionTest, MatchesDenseAttentionForScatteredBlocks) {
  const Case c = GetParam();
  const int64_t d = 16, block = 4, num_blocks = 32;
  const std::vector<int64_t> lens = {13, 1, 7};
  at::manual_seed(0);
  at::Tensor k_pool = at::zeros({num_blocks, block, c.kv_heads, d}, c.dtype);
  at::Tensor v_pool = at::zeros_like(k_pool);
  // Each sequence gets blocks from a shuffled list, so tables are not contiguous.
  std::vector<int32_t> free(num_blocks);
  std::iota(free.begin(), free.end(), 0);
  std::shuffle(free.begin(), free.end(), std::mt19937(3));
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> positions, seq_of_token;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> t;
    for (int64_t b = 0; b < (lens[s] + block - 1) / block; ++b) {
      t.push_back(free.back());
      free.pop_back();
    }
    tables.push_back(t);
    for (int64_t p = 0; p < lens[s]; ++p) {
      positions.push_back(static_cast<int32_t>(p));
      seq_of_token.push_back(static_cast<int32_t>(s));
    }
  }
  const int64_t max_blocks = 4;
  std::vector<int32_t> flat(tables.size() * max_blocks, 0);
  for (size_t s = 0; s < tables.size(); ++s)
    std::copy(tables[s].begin(), tables[s].end(), flat.begin() + s * max_blocks);
  AttentionBatch batch;
  batch.positions = &positions;
  batch.seq_of_token = &seq_of_token;
  batch.block_tables = flat.data();
  batch.max_blocks = max_blocks;
  batch.block_size = block;
  batch.sliding_window = c.window;

  const int64_t total = static_cast<int64_t>(positions.size());
  at::Tensor q = at::randn({total, c.heads, d}).to(c.dtype);
  at::Tensor k = at::randn({total, c.kv_heads, d}).to(c.dtype);
  at::Tensor v = at::randn({total, c.kv_heads, d}).to(c.dtype);
  WriteKv(k, v, k_pool, v_pool, batch);
  // The portable loop and this CPU's kernels (kernels/cpu/attention.h): AVX2, and AVX-512 where
  // the CPU has it (a cap above the CPU's set leaves its best).
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (isa > kernels::DetectedIsa()) continue;
    const kernels::Isa previous = kernels::CapIsa(isa);
    at::Tensor out = PagedAttention(q, k_pool, v_pool, batch).to(at::kFloat);
    kernels::CapIsa(previous);
    int64_t start = 0;
    for (int64_t len : lens) {
      at::Tensor ref =
          DenseAttention(q.narrow(0, start, len).to(at::kFloat), k.narrow(0, start, len).to(at::kFloat),
                         v.narrow(0, start, len).to(at::kFloat), c.window);
      const double err = (out.narrow(0, start, len) - ref).abs().max().item<double>();
      EXPECT_LT(err, c.tol) << "sequence of length " << len << ", " << kernels::IsaName(isa);
      start += len;
    }
  }
}

// One rank of an uneven tensor-parallel split (partitioning/shard_plan.h): 9 query heads
// over 3 KV heads on 2 ranks give rank 0 query heads 0-4 over KV heads 0-1 and rank 1
// query heads 5-8 over KV heads 1-2. Each rank's output must be its heads of the whole,
// on every path: the portable loop, this CPU's kernel and the ATen operators.
TEST(PagedAttentionUnevenTest, ARankOfAnUnevenSplitComputesItsHeadsOfTheWhole) {
  const int64_t heads = 9, kv_heads = 3, d = 16, block = 4, num_blocks = 8;
  std::vector<int32_t> positions, seq_of_token;
  for (int32_t p = 0; p < 11; ++p) {
    positions.push_back(p);
    seq_of_token.push_back(0);
  }
  std::vector<int32_t> table = {5, 2, 7, 0};
  AttentionBatch whole;
  whole.positions = &positions;
  whole.seq_of_token = &seq_of_token;
  whole.block_tables = table.data();
  whole.max_blocks = 4;
  whole.block_size = block;
  at::manual_seed(1);
  const int64_t total = static_cast<int64_t>(positions.size());
  at::Tensor q = at::randn({total, heads, d});
  at::Tensor k = at::randn({total, kv_heads, d}), v = at::randn({total, kv_heads, d});
  at::Tensor k_pool = at::zeros({num_blocks, block, kv_heads, d}), v_pool = at::zeros_like(k_pool);
  WriteKv(k, v, k_pool, v_pool, whole);
  const at::Tensor expected = PagedAttention(q, k_pool, v_pool, whole);
  struct Rank {
    int64_t q_start, q_len, kv_start, kv_len;
  };
  for (const Rank r : {Rank{0, 5, 0, 2}, Rank{5, 4, 1, 2}}) {
    AttentionBatch part = whole;
    part.kv_group = heads / kv_heads;
    part.q_head_offset = r.q_start - r.kv_start * part.kv_group;
    at::Tensor qr = q.narrow(1, r.q_start, r.q_len).contiguous();
    at::Tensor kr = k_pool.narrow(2, r.kv_start, r.kv_len).contiguous();
    at::Tensor vr = v_pool.narrow(2, r.kv_start, r.kv_len).contiguous();
    // The ATen path reads each token's slot and every run's key slots as tensors.
    std::vector<int64_t> slots, key_slots;
    PrepareDeviceBatch(part, slots, key_slots, /*with_keys=*/true);
    part.slots = at::from_blob(slots.data(), {static_cast<int64_t>(slots.size())}, at::kLong);
    part.key_slots = at::from_blob(key_slots.data(), {static_cast<int64_t>(key_slots.size())}, at::kLong);
    // The portable loop, the AVX2 kernel, this CPU's best kernel, ATen's operators.
    for (int path = 0; path < 4; ++path) {
      const kernels::Isa isa = path == 0   ? kernels::Isa::kScalar
                               : path == 1 ? kernels::Isa::kAvx2
                                           : kernels::DetectedIsa();
      if (isa > kernels::DetectedIsa()) continue;
      const kernels::Isa previous = kernels::CapIsa(isa);
      kernels::ForceAtenOps(path == 3);
      at::Tensor out = PagedAttention(qr, kr, vr, part);
      kernels::ForceAtenOps(false);
      kernels::CapIsa(previous);
      const double err = (out - expected.narrow(1, r.q_start, r.q_len)).abs().max().item<double>();
      EXPECT_LT(err, 1e-5) << "rank with query heads from " << r.q_start << ", path " << path;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(Case{4, 4, 0, at::kFloat, 1e-5},  // MHA
                                           Case{4, 2, 0, at::kFloat, 1e-5},  // GQA
                                           Case{4, 1, 0, at::kFloat, 1e-5},  // MQA
                                           Case{4, 2, 3, at::kFloat, 1e-5},  // sliding window
                                           Case{4, 2, 0, at::kBFloat16, 2e-2}));

}  // namespace
}  // namespace shardlm
