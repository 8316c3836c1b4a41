// kernels::Linear and every GEMV variant this CPU runs, against ATen's
// linear in double precision; the fused element-wise kernels against ATen
// compositions of the same formulas.
#include "kernels/linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"
#include "kernels/fused.h"

namespace shardlm::kernels {
namespace {

class IsaGuard {
 public:
  explicit IsaGuard(Isa isa) : previous_(CapIsa(isa)) {}
  ~IsaGuard() { CapIsa(previous_); }

 private:
  Isa previous_;
};

using Case = std::tuple<Isa, at::ScalarType>;

// "avx2_bf16": the case's name in the test list, so that a summary says which
// instruction set did not run on a CPU without it.
std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return IsaName(std::get<0>(info.param)) + (std::get<1>(info.param) == at::kFloat ? "_f32" : "_bf16");
}

class GemvTest : public ::testing::TestWithParam<Case> {};

// Rows 1..9 (every tile size and one past the AVX2 limit), several tiles of 8
// with tails, and more than one 256-row pass; k with and without a vector
// tail, with and without bias.
TEST_P(GemvTest, MatchesAtenLinear) {
  const auto [isa, dtype] = GetParam();
  if (isa > DetectedIsa()) GTEST_SKIP() << IsaName(isa) << " not on this CPU";
  IsaGuard guard(isa);
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 31, 300}) {
    for (int64_t k : {37, 768}) {
      for (bool with_bias : {false, true}) {
        at::manual_seed(m * 1000 + k);
        const int64_t n = 77;  // not a multiple of any row group
        at::Tensor x = at::randn({m, k}).to(dtype), w = at::randn({n, k}).to(dtype);
        at::Tensor bias = with_bias ? at::randn({n}).to(dtype) : at::Tensor();
        at::Tensor want =
            at::linear(x.to(at::kDouble), w.to(at::kDouble), with_bias ? bias.to(at::kDouble) : at::Tensor());
        at::Tensor got = Linear(x, w, bias);
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_EQ(got.sizes(), want.sizes());
        const double err = (got.to(at::kDouble) - want).abs().max().item<double>();
        // bf16 output rounding: relative 2^-8 of values up to ~4 sqrt(k).
        const double tol = dtype == at::kFloat ? 1e-4 : 0.01 * std::sqrt(static_cast<double>(k)) + 0.05;
        EXPECT_LT(err, tol) << IsaName(isa) << " m=" << m << " k=" << k << " bias " << with_bias;
      }
    }
  }
}

// The raw kernels on a row range of a strided activation: rows outside the
// range are left alone (each thread writes only its own).
TEST(GemvRawTest, RowRangeOfStridedActivations) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    const int64_t m = 5, k = 100;
    at::Tensor wide = at::randn({m, k + 5});
    at::Tensor x = wide.narrow(1, 0, k);
    at::Tensor w = at::randn({40, k});
    at::Tensor y = at::zeros({m, 40});
    GemvArgs<float> a{
        x.data_ptr<float>(), x.stride(0), w.data_ptr<float>(), nullptr, y.data_ptr<float>(), 40, m, k};
    GemvF32(isa)(a, 3, 37);
    at::Tensor want = at::linear(x, w);
    EXPECT_TRUE(at::allclose(y.narrow(1, 3, 34), want.narrow(1, 3, 34), 1e-4, 1e-4)) << IsaName(isa);
    EXPECT_EQ(y.narrow(1, 0, 3).abs().sum().item<float>(), 0.0f);
    EXPECT_EQ(y.narrow(1, 37, 3).abs().sum().item<float>(), 0.0f);
  }
}

// The AVX-512 kernels take any number of activation rows in one call (tiles
// of 8 over weight rows that stay in L1); Linear sends bf16 beyond 16 rows to
// oneDNN, so the kernel itself is checked here at those sizes.
TEST(GemvRawTest, Avx512AnyRowCount) {
  if (DetectedIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  for (int64_t m : {9, 16, 23, 40}) {
    const int64_t n = 50, k = 96;
    at::manual_seed(m);
    at::Tensor x = at::randn({m, k}).to(at::kBFloat16), w = at::randn({n, k}).to(at::kBFloat16);
    at::Tensor bias = at::randn({n}).to(at::kBFloat16);
    at::Tensor y = at::empty({m, n}, at::kBFloat16);
    GemvArgs<uint16_t> a{reinterpret_cast<const uint16_t*>(x.data_ptr()),
                         k,
                         reinterpret_cast<const uint16_t*>(w.data_ptr()),
                         reinterpret_cast<const uint16_t*>(bias.data_ptr()),
                         reinterpret_cast<uint16_t*>(y.data_ptr()),
                         n,
                         m,
                         k};
    GemvBf16(Isa::kAvx512)(a, 0, n);
    at::Tensor want = at::linear(x.to(at::kDouble), w.to(at::kDouble), bias.to(at::kDouble));
    const double err = (y.to(at::kDouble) - want).abs().max().item<double>();
    EXPECT_LT(err, 0.01 * std::sqrt(static_cast<double>(k)) + 0.05) << "m=" << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GemvTest,
                         ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(at::kFloat, at::kBFloat16)),
                         CaseName);

// Weights packed into panels (cpu/packed.h): every tile shape (1-4 rows span
// several panels, up to 8 one panel, more go through in blocks of k), panel
// tails (n not a multiple of 48), odd k (bf16's half-padded last pair), k over
// several blocks, bias and strided activations, through the AVX-512 and AVX2
// kernels and the portable one, against ATen in double precision.
class PackedTest : public ::testing::TestWithParam<Case> {};

TEST_P(PackedTest, MatchesAtenLinear) {
  const auto [isa, dtype] = GetParam();
  if (DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "weights are packed only on AVX2 and AVX-512 CPUs";
  if (isa > DetectedIsa()) GTEST_SKIP() << IsaName(isa) << " not on this CPU";
  for (int64_t n : {1, 47, 97, 200}) {
    for (int64_t k : {1, 37, 300}) {
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 260}) {
        const bool with_bias = (m + n) % 2 == 1;
        at::manual_seed(m * 7919 + n * 31 + k);
        at::Tensor wide = at::randn({m, k + 3}).to(dtype);
        at::Tensor x = wide.narrow(1, 1, k);  // a row stride of k + 3
        at::Tensor w = at::randn({n, k}).to(dtype);
        at::Tensor bias = with_bias ? at::randn({n}).to(dtype) : at::Tensor();
        at::Tensor want =
            at::linear(x.to(at::kDouble), w.to(at::kDouble), with_bias ? bias.to(at::kDouble) : at::Tensor());
        LinearWeight packed = LinearWeight::Prepare(w.clone());
        ASSERT_TRUE(packed.packed());
        ASSERT_EQ(packed.out_features(), n);
        ASSERT_EQ(packed.in_features(), k);
        at::Tensor got;
        {
          IsaGuard guard(isa);
          got = Linear(x, packed, bias);
        }
        ASSERT_EQ(got.scalar_type(), dtype);
        ASSERT_EQ(got.sizes(), want.sizes());
        // f32: accumulation error; bf16: the output's rounding (half an
        // ulp, 2^-9 relative) plus the accumulation's.
        at::Tensor excess =
            (got.to(at::kDouble) - want).abs() -
            (dtype == at::kFloat ? at::full_like(want, 1e-4) : want.abs() * (1.0 / 256) + 1e-3);
        EXPECT_LE(excess.max().item<double>(), 0.0)
            << IsaName(isa) << " m=" << m << " n=" << n << " k=" << k << " bias " << with_bias;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, PackedTest,
                         ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(at::kFloat, at::kBFloat16)),
                         CaseName);

// The fused epilogues (cpu/packed.h): a gate/up weight packed in pairs gives
// the bits of the product followed by SiluMul, and the product added into y
// the bits of the product followed by AddInPlace, for every tile shape,
// panel tail (inter not a multiple of 48) and k, through the AVX-512 and
// AVX2 kernels and the portable one.
class FusedEpilogueTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedEpilogueTest, SameBitsAsTheUnfusedCalls) {
  const auto [isa, dtype] = GetParam();
  if (DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "weights are packed only on AVX2 and AVX-512 CPUs";
  if (isa > DetectedIsa()) GTEST_SKIP() << IsaName(isa) << " not on this CPU";
  for (int64_t inter : {1, 47, 48, 97, 200}) {
    for (int64_t k : {1, 37, 300}) {
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 17, 260}) {
        at::manual_seed(m * 131 + inter * 17 + k);
        at::Tensor x = at::randn({m, k}).to(dtype);
        at::Tensor w = at::randn({2 * inter, k}).to(dtype);
        at::Tensor bias = m % 2 == 1 ? at::randn({2 * inter}).to(dtype) : at::Tensor();
        at::Tensor y0 = at::randn({m, 2 * inter}).to(dtype);
        LinearWeight gated = LinearWeight::PrepareGated(w.clone());
        LinearWeight plain = LinearWeight::Prepare(w.clone());
        ASSERT_TRUE(gated.gated());
        ASSERT_FALSE(plain.gated());
        IsaGuard guard(isa);
        at::Tensor fused = LinearSwiGlu(x, gated);
        at::Tensor unfused = SiluMul(Linear(x, plain));
        ASSERT_EQ(fused.sizes(), (std::vector<int64_t>{m, inter}));
        EXPECT_TRUE(at::equal(fused, unfused))
            << IsaName(isa) << " m=" << m << " inter=" << inter << " k=" << k;
        at::Tensor added = y0.clone();
        LinearAddTo(added, x, plain, bias);
        at::Tensor want = y0.clone();
        AddInPlace(want, Linear(x, plain, bias));
        EXPECT_TRUE(at::equal(added, want)) << IsaName(isa) << " m=" << m << " n=" << 2 * inter << " k=" << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, FusedEpilogueTest,
                         ::testing::Combine(::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                                            ::testing::Values(at::kFloat, at::kBFloat16)),
                         CaseName);

// A packed gate/up weight goes only through LinearSwiGlu; without AVX2 it
// stays as loaded and LinearSwiGlu and LinearAddTo fall back to the unfused
// calls.
TEST(FusedEpilogueTest, GatedWeightsOnlyThroughLinearSwiGlu) {
  at::manual_seed(3);
  at::Tensor w = at::randn({2 * 50, 20});
  at::Tensor x = at::randn({3, 20});
  if (DetectedIsa() >= Isa::kAvx2) {
    LinearWeight gated = LinearWeight::PrepareGated(w.clone());
    EXPECT_THROW(Linear(x, gated), c10::Error);
    EXPECT_THROW(gated.Rows(at::tensor({0}, at::kLong)), c10::Error);
  }
  EXPECT_THROW(LinearWeight::PrepareGated(at::randn({3, 20})), c10::Error);
  IsaGuard guard(Isa::kScalar);
  LinearWeight plain = LinearWeight::PrepareGated(w.clone());
  EXPECT_FALSE(plain.packed());
  EXPECT_FALSE(plain.gated());
  EXPECT_TRUE(at::equal(LinearSwiGlu(x, plain), SiluMul(Linear(x, w))));
  at::Tensor y = at::randn({3, 100}), want = y.clone();
  LinearAddTo(y, x, plain);
  AddInPlace(want, Linear(x, w));
  EXPECT_TRUE(at::equal(y, want));
}

// A row's result does not depend on the rows batched with it (each output
// sums in k order in every tile shape), so a sequence decodes the same alone
// or in a batch of any size.
void RowResultsDoNotDependOnTheBatchAt(Isa isa);

TEST(PackedTest, RowResultsDoNotDependOnTheBatch) {
  if (DetectedIsa() < Isa::kAvx2) GTEST_SKIP() << "weights are packed only on AVX2 and AVX-512 CPUs";
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa > DetectedIsa()) continue;
    IsaGuard guard(isa);
    RowResultsDoNotDependOnTheBatchAt(isa);
  }
}

// The AVX2 kernels give the AVX-512 kernels' bits, for every tile shape, tail
// and epilogue: a model's products are the same on either CPU (its attention
// and log-sum-exp add in other orders, within their bounds).
TEST(PackedTest, Avx2GivesTheAvx512Bits) {
  if (DetectedIsa() < Isa::kAvx512) GTEST_SKIP() << "avx512 not on this CPU: nothing to compare with";
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t k : {1, 2, 37, 300}) {
      for (int64_t m : {1, 2, 3, 5, 8, 9, 40}) {
        at::manual_seed(m * 101 + k);
        const int64_t n = 97, inter = 53;
        at::Tensor x = at::randn({m, k}).to(dtype);
        at::Tensor bias = at::randn({n}).to(dtype);
        LinearWeight w = LinearWeight::Prepare(at::randn({n, k}).to(dtype));
        LinearWeight gated = LinearWeight::PrepareGated(at::randn({2 * inter, k}).to(dtype));
        at::Tensor y0 = at::randn({m, n}).to(dtype);
        auto run = [&](Isa isa) {
          IsaGuard guard(isa);
          at::Tensor added = y0.clone();
          LinearAddTo(added, x, w, bias);
          return std::make_tuple(Linear(x, w, bias), LinearSwiGlu(x, gated), added);
        };
        const auto [plain2, swiglu2, added2] = run(Isa::kAvx2);
        const auto [plain5, swiglu5, added5] = run(Isa::kAvx512);
        EXPECT_TRUE(at::equal(plain2, plain5)) << dtype << " m=" << m << " k=" << k;
        EXPECT_TRUE(at::equal(swiglu2, swiglu5)) << dtype << " m=" << m << " k=" << k;
        EXPECT_TRUE(at::equal(added2, added5)) << dtype << " m=" << m << " k=" << k;
      }
    }
  }
}

void RowResultsDoNotDependOnTheBatchAt(Isa isa) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(5);
    const int64_t k = 301, n = 150;
    at::Tensor x = at::randn({300, k}).to(dtype);
    LinearWeight w = LinearWeight::Prepare(at::randn({n, k}).to(dtype));
    at::Tensor all = Linear(x, w);
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 40, 300}) {
      at::Tensor part = Linear(x.narrow(0, 0, m), w);
      EXPECT_TRUE(at::equal(part, all.narrow(0, 0, m))) << IsaName(isa) << " m=" << m << " " << dtype;
      at::Tensor one = Linear(x.narrow(0, m - 1, 1), w);
      EXPECT_TRUE(at::equal(one, all.narrow(0, m - 1, 1)))
          << IsaName(isa) << " row " << m - 1 << " " << dtype;
    }
  }
}

// Rows() reads the original rows back out of the packed layout (the tied
// embedding's lookup); without AVX2 (or with SHARDLM_CPU_ISA below it)
// weights stay as loaded.
TEST(PackedTest, RowsAndUnpackedFallback) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(9);
    at::Tensor w = at::randn({97, 37}).to(dtype);
    at::Tensor index = at::tensor({0, 96, 48, 47, 5, 5}, at::kLong);
    LinearWeight lw = LinearWeight::Prepare(w.clone());
    EXPECT_EQ(lw.packed(), DetectedIsa() >= Isa::kAvx2);
    EXPECT_TRUE(at::equal(lw.Rows(index), w.index_select(0, index))) << dtype;
    IsaGuard guard(Isa::kScalar);
    LinearWeight plain = LinearWeight::Prepare(w.clone());
    EXPECT_FALSE(plain.packed());
    EXPECT_TRUE(at::equal(plain.plain(), w));
    EXPECT_TRUE(at::equal(plain.Rows(index), w.index_select(0, index)));
    at::Tensor x = at::randn({3, 37}).to(dtype);
    EXPECT_TRUE(at::equal(Linear(x, plain), Linear(x, w)));
  }
}

TEST(FusedTest, RmsNormMatchesHuggingFaceFormula) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    at::Tensor x = at::randn({5, 64}).to(dtype), w = at::randn({64}).to(dtype);
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor want = (xf * at::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(dtype) * w;
    at::Tensor got = RmsNorm(x, w, 1e-6);
    EXPECT_TRUE(at::allclose(got.to(at::kFloat), want.to(at::kFloat), 1e-2, 1e-5)) << dtype;
  }
}

TEST(FusedTest, RotaryHeadsNormAddAndSiluMul) {
  const int64_t rows = 3, heads = 4, d = 16, half = d / 2;
  at::Tensor x = at::randn({rows, heads * d + 8});
  at::Tensor cos = at::rand({rows, half}), sin = at::rand({rows, half});
  at::Tensor v = x.narrow(1, 0, heads * d).view({rows, heads, d});
  at::Tensor x1 = v.narrow(2, 0, half), x2 = v.narrow(2, half, half);
  at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  at::Tensor want = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  at::Tensor tail = x.narrow(1, heads * d, 8).clone();
  RotaryInPlace(x, heads, d, cos, sin);
  EXPECT_TRUE(at::allclose(x.narrow(1, 0, heads * d).view({rows, heads, d}), want, 1e-5, 1e-6));
  EXPECT_TRUE(at::equal(x.narrow(1, heads * d, 8), tail));  // columns past the heads untouched

  at::Tensor y = at::randn({rows, 3 * d}), nw = at::randn({d});
  at::Tensor head1 = y.narrow(1, d, d);
  at::Tensor want_norm = head1 * at::rsqrt(head1.pow(2).mean(-1, true) + 1e-5) * nw;
  RmsNormHeadsInPlace(y, 1, 1, d, nw, 1e-5);
  EXPECT_TRUE(at::allclose(y.narrow(1, d, d), want_norm, 1e-4, 1e-5));

  at::Tensor a = at::randn({rows, 10}), b = at::randn({rows, 10});
  at::Tensor sum = a + b;
  AddInPlace(a, b);
  EXPECT_TRUE(at::allclose(a, sum));

  at::Tensor gu = at::randn({rows, 20});
  EXPECT_TRUE(at::allclose(SiluMul(gu), at::silu(gu.narrow(1, 0, 10)) * gu.narrow(1, 10, 10), 1e-5, 1e-6));
}

TEST(IsaTest, EnvironmentAndTestingCapNeverRaiseAboveTheCpu) {
  const Isa before = CapIsa(Isa::kAvx512);
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
  CapIsa(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  CapIsa(before);
}

}  // namespace
}  // namespace shardlm::kernels
