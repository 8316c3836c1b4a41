// The AVX2 and AVX-512 decode attention kernels against a double-precision
// reference: head sizes 16 to 256, groups of query heads beyond one pass of
// 8, key counts around the kernels' blocks of 8 and 16, keys scattered over
// slots. Each runs where the CPU has its instruction set.
#include "kernels/cpu/attention.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

namespace shardlm::kernels {
namespace {

template <typename T>
void CheckShape(Isa isa, int64_t d, int64_t group, int64_t n, at::ScalarType dtype, double tol) {
  const int64_t slots_total = n + 5, kv_heads = 2, kvh = 1;
  at::manual_seed(d * 131 + group * 17 + n);
  at::Tensor q = at::randn({group, d}).to(dtype);
  at::Tensor k = at::randn({slots_total, kv_heads, d}).to(dtype);
  at::Tensor v = at::randn({slots_total, kv_heads, d}).to(dtype);
  std::vector<int64_t> slots(slots_total);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937(static_cast<uint32_t>(n)));
  slots.resize(n);
  at::Tensor out = at::empty({group, d}, dtype);
  std::vector<float> scratch(group * n);
  DecodeAttentionArgs<T> a;
  a.q = static_cast<const T*>(q.data_ptr());
  a.q_head_stride = d;
  a.k = static_cast<const T*>(k.data_ptr()) + kvh * d;
  a.v = static_cast<const T*>(v.data_ptr()) + kvh * d;
  a.kv_slot_stride = kv_heads * d;
  a.slots = slots.data();
  a.n = n;
  a.out = static_cast<T*>(out.data_ptr());
  a.out_head_stride = d;
  a.group = group;
  a.d = d;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.scratch = scratch.data();
  if constexpr (std::is_same_v<T, float>) {
    DecodeAttentionF32(isa, d)(a);
  } else {
    DecodeAttentionBf16(isa, d)(a);
  }
  at::Tensor index = at::tensor(slots, at::kLong);
  at::Tensor kd = k.select(1, kvh).index_select(0, index).to(at::kDouble);  // [n, d]
  at::Tensor vd = v.select(1, kvh).index_select(0, index).to(at::kDouble);
  at::Tensor probs = (q.to(at::kDouble).matmul(kd.t()) / std::sqrt(static_cast<double>(d))).softmax(-1);
  at::Tensor want = probs.matmul(vd);
  const double err = (out.to(at::kDouble) - want).abs().max().item<double>();
  EXPECT_LT(err, tol) << "d=" << d << " group=" << group << " n=" << n;
}

// The parameter is the instruction set whose kernel runs.
class DecodeAttentionTest : public ::testing::TestWithParam<Isa> {};

TEST_P(DecodeAttentionTest, MatchesReference) {
  const Isa isa = GetParam();
  if (isa > DetectedIsa()) GTEST_SKIP() << IsaName(isa) << " not on this CPU";
  for (int64_t d : {16, 48, 64, 128, 256}) {
    for (int64_t group : {1, 3, 8, 10}) {
      for (int64_t n : {1, 7, 8, 9, 17, 300}) {
        CheckShape<float>(isa, d, group, n, at::kFloat, 2e-6);
        // bf16: the output's rounding (2^-8 relative) dominates.
        CheckShape<uint16_t>(isa, d, group, n, at::kBFloat16, 2e-2);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, DecodeAttentionTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); });

TEST(DecodeAttentionTest, ShapesOutsideTheKernelFallBack) {
  EXPECT_EQ(DecodeAttentionF32(Isa::kAvx512, 24), nullptr);   // not a multiple of 16
  EXPECT_EQ(DecodeAttentionF32(Isa::kAvx512, 512), nullptr);  // beyond 256
  EXPECT_EQ(DecodeAttentionBf16(Isa::kScalar, 64), nullptr);
  EXPECT_EQ(DecodeAttentionBf16(Isa::kAvx2, 40), nullptr);
  EXPECT_NE(DecodeAttentionF32(Isa::kAvx2, 64), nullptr);
  EXPECT_NE(DecodeAttentionBf16(Isa::kAvx2, 256), nullptr);
}

}  // namespace
}  // namespace shardlm::kernels
