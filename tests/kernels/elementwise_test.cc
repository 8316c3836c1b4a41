// The AVX2 and AVX-512 element-wise kernels against scalar references:
// SiLU x up and log-sum-exp at every length around the 8- and 16-lane
// blocks, large and tiny inputs, bf16 rounding of the activation as Hugging
// Face rounds it; RMSNorm, rotary and the residual add through
// kernels/fused.h against its scalar loops, in both dtypes. Each check runs
// once per instruction set (skipped where the CPU lacks it); on an AVX-512
// CPU the AVX2 kernels must also give the AVX-512 ones' bits.
#include "kernels/cpu/elementwise.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/fused.h"

namespace shardlm::kernels {
namespace {

// The parameter is the instruction set whose kernels run.
class ElementwiseTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (GetParam() > DetectedIsa()) GTEST_SKIP() << IsaName(GetParam()) << " not on this CPU";
  }
};

TEST_P(ElementwiseTest, SiluMulF32MatchesScalar) {
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 100, 2048}) {
    at::manual_seed(n);
    at::Tensor g = at::randn({n}) * 8, u = at::randn({n});
    g[0] = -100.0f;  // exp(100) overflows: silu is -0
    at::Tensor o = at::empty({n});
    SiluMulF32Kernel(GetParam())(g.data_ptr<float>(), u.data_ptr<float>(), o.data_ptr<float>(), n);
    at::Tensor gd = g.to(at::kDouble);
    at::Tensor want = gd / (1 + (-gd).exp()) * u.to(at::kDouble);
    // Within a few f32 ulps of each value.
    const at::Tensor rel = (o.to(at::kDouble) - want).abs() / want.abs().clamp_min(1.0);
    EXPECT_LT(rel.max().item<double>(), 3e-7) << "n=" << n;
  }
}

TEST_P(ElementwiseTest, SiluMulBf16RoundsTheActivationThenTheProduct) {
  for (int64_t n : {1, 8, 13, 16, 33, 2048}) {
    at::manual_seed(n);
    at::Tensor g = (at::randn({n}) * 4).to(at::kBFloat16), u = at::randn({n}).to(at::kBFloat16);
    at::Tensor o = at::empty({n}, at::kBFloat16);
    SiluMulBf16Kernel(GetParam())(static_cast<const uint16_t*>(g.data_ptr()),
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

TEST_P(ElementwiseTest, LogSumExpMatchesDouble) {
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 32000}) {
    at::manual_seed(n);
    at::Tensor x = at::randn({n}) * 10;
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // a masked-out logit
    const float got = LogSumExpKernel(GetParam())(x.data_ptr<float>(), n);
    const double want = x.to(at::kDouble).logsumexp(0).item<double>();
    EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::abs(want))) << "n=" << n;
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> all_masked = {-inf, -inf, -inf};
  EXPECT_EQ(LogSumExpKernel(GetParam())(all_masked.data(), 3), -inf);
}

// The greedy token: the first of equal maxima, as std::max_element; ties
// placed across the main loop (32 or 64 elements a step) and the tail; -1
// for any NaN.
TEST_P(ElementwiseTest, ArgMaxIsTheFirstLargest) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 32000}) {
    at::manual_seed(n);
    at::Tensor t = at::randn({n});
    std::vector<float> x(t.data_ptr<float>(), t.data_ptr<float>() + n);
    auto want = [&] { return static_cast<int64_t>(std::max_element(x.begin(), x.end()) - x.begin()); };
    EXPECT_EQ(ArgMaxKernel(GetParam())(x.data(), n), want()) << "n=" << n;
    // Equal maxima: the first wins.
    for (int64_t a : {n - 1, n / 2, int64_t{0}}) {
      x[a] = 100.0f;
      EXPECT_EQ(ArgMaxKernel(GetParam())(x.data(), n), a) << "n=" << n << " tie at " << a;
    }
    if (n > 2) {
      x.assign(n, -inf);  // every logit masked but one
      x[n - 2] = -inf / 2;
      x[n - 1] = 3.0f;
      EXPECT_EQ(ArgMaxKernel(GetParam())(x.data(), n), n - 1);
      x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(ArgMaxKernel(GetParam())(x.data(), n), -1) << "n=" << n;
    }
  }
}

// fn() under the scalar loops and under the vector kernels of `isa` (the ISA
// capped at each in turn).
template <typename Fn>
std::pair<at::Tensor, at::Tensor> ScalarAndVector(Isa isa, Fn fn) {
  const Isa before = CapIsa(Isa::kScalar);
  at::Tensor scalar = fn();
  CapIsa(isa);
  at::Tensor vector = fn();
  CapIsa(before);
  return {scalar, vector};
}

TEST_P(ElementwiseTest, RmsNormRotaryAndAddMatchTheScalarLoops) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t dim : {16, 40, 44, 768}) {
      at::manual_seed(dim);
      // Rows strided: the norm reads a narrowed view, as of the residual stream.
      at::Tensor x = (at::randn({5, dim + 8}) * 3).to(dtype).narrow(1, 0, dim);
      at::Tensor w = at::randn({dim}).to(dtype);
      auto [norm_s, norm_v] = ScalarAndVector(GetParam(), [&] { return RmsNorm(x, w, 1e-5); });
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
      auto [rot_s, rot_v] = ScalarAndVector(GetParam(), [&] {
        at::Tensor t = qk.clone();
        RotaryInPlace(t, heads, dim, cos, sin);
        return t;
      });
      EXPECT_TRUE(at::equal(rot_s, rot_v)) << dtype << " dim=" << dim;

      at::Tensor a = at::randn({3, dim + 1}).to(dtype), b = at::randn({3, dim + 1}).to(dtype);
      auto [add_s, add_v] = ScalarAndVector(GetParam(), [&] {
        at::Tensor t = a.clone();
        AddInPlace(t, b);
        return t;
      });
      EXPECT_TRUE(at::equal(add_s, add_v)) << dtype << " dim=" << dim;

      // Qwen3's per-head norm, in place on a qkv row's heads.
      at::Tensor hw = at::randn({16}).to(dtype);
      auto [heads_s, heads_v] = ScalarAndVector(GetParam(), [&] {
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

INSTANTIATE_TEST_SUITE_P(Isas, ElementwiseTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return IsaName(info.param); });

// n floats, normal with standard deviation `scale`, and the same rounded to
// bf16 (as bits).
std::vector<float> NormalFloats(int64_t n, double scale, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor t = at::randn({n}) * scale;
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}
std::vector<uint16_t> NormalBf16(int64_t n, double scale, uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor t = (at::randn({n}) * scale).to(at::kBFloat16);
  const uint16_t* p = static_cast<const uint16_t*>(t.data_ptr());
  return std::vector<uint16_t>(p, p + n);
}

template <typename T>
bool BitwiseEqual(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Lengths around the 8-lane blocks of AVX2, the 16-lane ones of AVX-512 and
// the 32- and 64-element steps of the arg max, with tails of every size.
std::vector<int64_t> LengthsAroundBlocks() {
  std::vector<int64_t> n;
  for (int64_t i = 1; i <= 33; ++i) n.push_back(i);
  for (int64_t i : {47, 48, 49, 63, 64, 65, 71, 127, 128, 129, 200, 1003}) n.push_back(i);
  return n;
}

// The AVX2 loops compute the AVX-512 loops' operations in the same order
// (RMSNorm's sum of squares included), so where both run they agree to the
// bit: finite inputs, large ones included (exp overflows and underflows).
// Log-sum-exp adds in another order and is left out.
TEST(ElementwiseKernels, Avx2GivesTheAvx512Bits) {
  if (DetectedIsa() < Isa::kAvx512) GTEST_SKIP() << "needs an AVX-512 CPU, to run both";
  const Isa v2 = Isa::kAvx2, v5 = Isa::kAvx512;
  for (int64_t n : LengthsAroundBlocks()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    {
      std::vector<float> g = NormalFloats(n, 12, n), u = NormalFloats(n, 1, n + 1), o2(n), o5(n);
      g[0] = -100.0f;
      g[n / 2] = 100.0f;
      SiluMulF32Kernel(v2)(g.data(), u.data(), o2.data(), n);
      SiluMulF32Kernel(v5)(g.data(), u.data(), o5.data(), n);
      EXPECT_TRUE(BitwiseEqual(o2, o5)) << "silu x up f32";
    }
    {
      std::vector<uint16_t> g = NormalBf16(n, 12, n), u = NormalBf16(n, 1, n + 1), o2(n), o5(n);
      SiluMulBf16Kernel(v2)(g.data(), u.data(), o2.data(), n);
      SiluMulBf16Kernel(v5)(g.data(), u.data(), o5.data(), n);
      EXPECT_TRUE(BitwiseEqual(o2, o5)) << "silu x up bf16";
    }
    {
      std::vector<float> x = NormalFloats(n, 3, n), w = NormalFloats(n, 1, n + 1), o2(n), o5(n);
      RmsNormF32Kernel(v2)(x.data(), w.data(), o2.data(), n, 1e-6f);
      RmsNormF32Kernel(v5)(x.data(), w.data(), o5.data(), n, 1e-6f);
      EXPECT_TRUE(BitwiseEqual(o2, o5)) << "rmsnorm f32";
    }
    {
      std::vector<uint16_t> x = NormalBf16(n, 3, n), w = NormalBf16(n, 1, n + 1), o2(n), o5(n);
      RmsNormBf16Kernel(v2)(x.data(), w.data(), o2.data(), n, 1e-6f);
      RmsNormBf16Kernel(v5)(x.data(), w.data(), o5.data(), n, 1e-6f);
      EXPECT_TRUE(BitwiseEqual(o2, o5)) << "rmsnorm bf16";
    }
    {
      // n is the half of two heads here.
      const std::vector<float> c = NormalFloats(n, 1, n + 2), s = NormalFloats(n, 1, n + 3);
      std::vector<float> x2 = NormalFloats(4 * n, 2, n), x5 = x2;
      RotaryF32Kernel(v2)(x2.data(), 2, n, c.data(), s.data());
      RotaryF32Kernel(v5)(x5.data(), 2, n, c.data(), s.data());
      EXPECT_TRUE(BitwiseEqual(x2, x5)) << "rotary f32";
      std::vector<uint16_t> b2 = NormalBf16(4 * n, 2, n), b5 = b2;
      RotaryBf16Kernel(v2)(b2.data(), 2, n, c.data(), s.data());
      RotaryBf16Kernel(v5)(b5.data(), 2, n, c.data(), s.data());
      EXPECT_TRUE(BitwiseEqual(b2, b5)) << "rotary bf16";
    }
    {
      const std::vector<float> y = NormalFloats(n, 1, n + 1);
      std::vector<float> x2 = NormalFloats(n, 1, n), x5 = x2;
      AddF32Kernel(v2)(x2.data(), y.data(), n);
      AddF32Kernel(v5)(x5.data(), y.data(), n);
      EXPECT_TRUE(BitwiseEqual(x2, x5)) << "add f32";
      const std::vector<uint16_t> yb = NormalBf16(n, 1, n + 1);
      std::vector<uint16_t> b2 = NormalBf16(n, 1, n), b5 = b2;
      AddBf16Kernel(v2)(b2.data(), yb.data(), n);
      AddBf16Kernel(v5)(b5.data(), yb.data(), n);
      EXPECT_TRUE(BitwiseEqual(b2, b5)) << "add bf16";
    }
    {
      // Ties at the block edges: the first wins in both.
      std::vector<float> x = NormalFloats(n, 1, n);
      EXPECT_EQ(ArgMaxKernel(v2)(x.data(), n), ArgMaxKernel(v5)(x.data(), n));
      for (int64_t a : {n - 1, n / 2, std::min<int64_t>(n - 1, 8), std::min<int64_t>(n - 1, 16)}) {
        x[a] = 50.0f;
        EXPECT_EQ(ArgMaxKernel(v2)(x.data(), n), ArgMaxKernel(v5)(x.data(), n)) << "tie at " << a;
      }
    }
  }
}

TEST(ElementwiseKernels, NoneOnScalarCpus) {
  EXPECT_EQ(SiluMulF32Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(SiluMulBf16Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(LogSumExpKernel(Isa::kScalar), nullptr);
  EXPECT_EQ(ArgMaxKernel(Isa::kScalar), nullptr);
  EXPECT_EQ(RmsNormBf16Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(RotaryF32Kernel(Isa::kScalar), nullptr);
  EXPECT_EQ(AddBf16Kernel(Isa::kScalar), nullptr);
  EXPECT_NE(SiluMulF32Kernel(Isa::kAvx2), nullptr);
  EXPECT_NE(LogSumExpKernel(Isa::kAvx2), nullptr);
  EXPECT_NE(RmsNormBf16Kernel(Isa::kAvx2), nullptr);
  EXPECT_NE(AddBf16Kernel(Isa::kAvx2), nullptr);
}

}  // namespace
}  // namespace shardlm::kernels
