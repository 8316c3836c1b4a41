// The AVX-512 element-wise kernels against scalar references: SiLU x up and
// log-sum-exp at every length around the 16-lane blocks, large and tiny
// inputs, bf16 rounding of the activation as Hugging Face rounds it; RMSNorm,
// rotary and the residual add through kernels/fused.h against its scalar
// loops, in both dtypes.
#include "kernels/cpu/elementwise.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fused.h"

namespace shardlm::kernels {
namespace {

class Avx512Only : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DetectedIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  }
};

using ElementwiseTest = Avx512Only;

TEST_F(ElementwiseTest, SiluMulF32MatchesScalar) {
  for (int64_t n : {1, 15, 16, 17, 100, 2048}) {
    at::manual_seed(n);
    at::Tensor g = at::randn({n}) * 8, u = at::randn({n});
    g[0] = -100.0f;  // exp(100) overflows: silu is -0
    at::Tensor o = at::empty({n});
    SiluMulF32Kernel(Isa::kAvx512)(g.data_ptr<float>(), u.data_ptr<float>(), o.data_ptr<float>(), n);
    at::Tensor gd = g.to(at::kDouble);
    at::Tensor want = gd / (1 + (-gd).exp()) * u.to(at::kDouble);
    // Within a few f32 ulps of each value.
    const at::Tensor rel = (o.to(at::kDouble) - want).abs() / want.abs().clamp_min(1.0);
    EXPECT_LT(rel.max().item<double>(), 3e-7) << "n=" << n;
  }
}

TEST_F(ElementwiseTest, SiluMulBf16RoundsTheActivationThenTheProduct) {
  for (int64_t n : {1, 16, 33, 2048}) {
    at::manual_seed(n);
    at::Tensor g = (at::randn({n}) * 4).to(at::kBFloat16), u = at::randn({n}).to(at::kBFloat16);
    at::Tensor o = at::empty({n}, at::kBFloat16);
    SiluMulBf16Kernel(Isa::kAvx512)(static_cast<const uint16_t*>(g.data_ptr()),
                                    static_cast<const uint16_t*>(u.data_ptr()),
                                    static_cast<uint16_t*>(o.data_ptr()), n);
    // Hugging Face: act_fn(gate) in bf16, times up in bf16.
    at::Tensor act = at::silu(g.to(at::kFloat)).to(at::kBFloat16);
    at::Tensor want = (act.to(at::kFloat) * u.to(at::kFloat)).to(at::kBFloat16);
    const int64_t differ = (o.to(at::kFloat) != want.to(at::kFloat)).sum().item<int64_t>();
    // The polynomial exp may land an activation on the other side of a bf16
    // rounding boundary; such a value is off by one bf16 step, and rarely.
    EXPECT_LE(differ, std::max<int64_t>(1, n / 100)) << "n=" << n;
    EXPECT_LT((o.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<float>(), 0.05f) << "n=" << n;
  }
}

TEST_F(ElementwiseTest, LogSumExpMatchesDouble) {
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 32000}) {
    at::manual_seed(n);
    at::Tensor x = at::randn({n}) * 10;
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // a masked-out logit
    const float got = LogSumExpKernel(Isa::kAvx512)(x.data_ptr<float>(), n);
    const double want = x.to(at::kDouble).logsumexp(0).item<double>();
    EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::abs(want))) << "n=" << n;
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> all_masked = {-inf, -inf, -inf};
  EXPECT_EQ(LogSumExpKernel(Isa::kAvx512)(all_masked.data(), 3), -inf);
}

// The greedy token: the first of equal maxima, as std::max_element; ties
// placed across the 64-element main loop and the tail; -1 for any NaN.
TEST_F(ElementwiseTest, ArgMaxIsTheFirstLargest) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 100, 32000}) {
    at::manual_seed(n);
    at::Tensor t = at::randn({n});
    std::vector<float> x(t.data_ptr<float>(), t.data_ptr<float>() + n);
    auto want = [&] { return static_cast<int64_t>(std::max_element(x.begin(), x.end()) - x.begin()); };
    EXPECT_EQ(ArgMaxKernel(Isa::kAvx512)(x.data(), n), want()) << "n=" << n;
    // Equal maxima: the first wins.
    for (int64_t a : {n - 1, n / 2, int64_t{0}}) {
      x[a] = 100.0f;
      EXPECT_EQ(ArgMaxKernel(Isa::kAvx512)(x.data(), n), a) << "n=" << n << " tie at " << a;
    }
    if (n > 2) {
      x.assign(n, -inf);  // every logit masked but one
      x[n - 2] = -inf / 2;
      x[n - 1] = 3.0f;
      EXPECT_EQ(ArgMaxKernel(Isa::kAvx512)(x.data(), n), n - 1);
      x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(ArgMaxKernel(Isa::kAvx512)(x.data(), n), -1) << "n=" << n;
    }
  }
}

// fn() under the scalar loops (the ISA capped) and under the vector kernels.
template <typename Fn>
std::pair<at::Tensor, at::Tensor> ScalarAndVector(Fn fn) {
  const Isa before = CapIsa(Isa::kScalar);
  at::Tensor scalar = fn();
  CapIsa(Isa::kAvx512);
  at::Tensor vector = fn();
  CapIsa(before);
  return {scalar, vector};
}

TEST_F(ElementwiseTest, RmsNormRotaryAndAddMatchTheScalarLoops) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t dim : {16, 40, 768}) {
      at::manual_seed(dim);
      // Rows strided: the norm reads a narrowed view, as of the residual stream.
      at::Tensor x = (at::randn({5, dim + 8}) * 3).to(dtype).narrow(1, 0, dim);
      at::Tensor w = at::randn({dim}).to(dtype);
      auto [norm_s, norm_v] = ScalarAndVector([&] { return RmsNorm(x, w, 1e-5); });
      // The sum of squares is added in another order: f32 within an ulp or
      // two; bf16 the same value, or one step away where a product sits on a
      // rounding boundary.
      const at::Tensor diff = (norm_s.to(at::kFloat) - norm_v.to(at::kFloat)).abs();
      const double step = dtype == at::kFloat ? 1e-6 : 1.0 / 128;
      EXPECT_LE(diff.max().item<double>(), step * (norm_s.to(at::kFloat).abs().max().item<double>() + 1))
          << dtype << " dim=" << dim;
      EXPECT_LE((diff > 0).sum().item<int64_t>(), dtype == at::kFloat ? diff.numel() : diff.numel() / 50 + 1);

      // Heads of 2 * half; columns past them stay as they were.
      const int64_t heads = 3, half = dim / 2;
      at::Tensor qk = (at::randn({4, heads * dim + 5}) * 2).to(dtype);
      at::Tensor cos = at::rand({4, half}), sin = at::rand({4, half});
      auto [rot_s, rot_v] = ScalarAndVector([&] {
        at::Tensor t = qk.clone();
        RotaryInPlace(t, heads, dim, cos, sin);
        return t;
      });
      EXPECT_TRUE(at::equal(rot_s, rot_v)) << dtype << " dim=" << dim;

      at::Tensor a = at::randn({3, dim + 1}).to(dtype), b = at::randn({3, dim + 1}).to(dtype);
      auto [add_s, add_v] = ScalarAndVector([&] {
        at::Tensor t = a.clone();
        AddInPlace(t, b);
        return t;
      });
      EXPECT_TRUE(at::equal(add_s, add_v)) << dtype << " dim=" << dim;

      // Qwen3's per-head norm, in place on a qkv row's heads.
      at::Tensor hw = at::randn({16}).to(dtype);
      auto [heads_s, heads_v] = ScalarAndVector([&] {
        at::Tensor t = qk.clone();
        RmsNormHeadsInPlace(t, 1, 2, 16, hw, 1e-6);
        return t;
      });
      EXPECT_LE((heads_s.to(at::kFloat) - heads_v.to(at::kFloat)).abs().max().item<double>(),
                step * (heads_s.to(at::kFloat).abs().max().item<double>() + 1));
      EXPECT_TRUE(at::equal(heads_s.narrow(1, 48, heads * dim + 5 - 48),
                            heads_v.narrow(1, 48, heads * dim + 5 - 48)));
    }
  }
}

TEST(ElementwiseKernels, NoneWithoutAvx512) {
  EXPECT_EQ(SiluMulF32Kernel(Isa::kAvx2), nullptr);
  EXPECT_EQ(SiluMulBf16Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(LogSumExpKernel(Isa::kAvx2), nullptr);
  EXPECT_EQ(ArgMaxKernel(Isa::kScalar), nullptr);
  EXPECT_EQ(RmsNormBf16Kernel(Isa::kAvx2), nullptr);
  EXPECT_EQ(RotaryF32Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(AddBf16Kernel(Isa::kAvx2), nullptr);
}

}  // namespace
}  // namespace shardlm::kernels
