// kernels/fused.h on CUDA tensors (the CUDA variant's element-wise kernels,
// kernels/cuda/elementwise.cu) against the ATen operators they replace, on the
// same GPU: RMSNorm over strided rows, rotary in place on a view into a qkv
// projection, SiLU x up, in f32 and bf16. Skipped without a GPU; in the CPU
// build the same calls take the ATen path and the test still holds.
#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/fused.h"

namespace shardlm::kernels {
namespace {

class CudaFusedTest : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (at::detail::getCUDAHooks().getNumGPUs() == 0) GTEST_SKIP() << "no GPU";
  }
  at::TensorOptions Opts() const { return at::TensorOptions().dtype(GetParam()).device(at::kCUDA); }
  // f32: a few ulps of the largest value; bf16: one rounding of the output (2^-8 relative).
  void ExpectClose(const at::Tensor& got, const at::Tensor& want, const char* what) const {
    const double scale = want.abs().max().item<double>();
    const double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
    const double tol = GetParam() == at::kFloat ? 2e-6 * scale : std::ldexp(scale, -7);
    EXPECT_LE(diff, tol) << what << " max |diff| " << diff;
  }
};

TEST_P(CudaFusedTest, RmsNormEqualsAten) {
  at::manual_seed(1);
  at::Tensor wide = at::randn({5, 4096 + 64}, Opts()) * 3;
  at::Tensor x = wide.narrow(1, 0, 4096);  // rows 4160 elements apart
  at::Tensor w = at::rand({4096}, Opts()) + 0.5;
  const double eps = 1e-5;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor want = (xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(GetParam()) * w;
  ExpectClose(RmsNorm(x, w, eps), want, "rms norm");
}

TEST_P(CudaFusedTest, RotaryInPlaceEqualsAten) {
  at::manual_seed(2);
  const int64_t rows = 3, heads = 12, d = 128, half = d / 2;
  at::Tensor qkv = at::randn({rows, (heads + 4) * d}, Opts());
  at::Tensor cos = at::rand({rows, half}, Opts().dtype(at::kFloat)),
             sin = at::rand({rows, half}, Opts().dtype(at::kFloat));
  at::Tensor xf = qkv.narrow(1, 0, heads * d).view({rows, heads, d}).to(at::kFloat);
  at::Tensor x1 = xf.narrow(2, 0, half), x2 = xf.narrow(2, half, half);
  at::Tensor c = cos.view({rows, 1, half}), s = sin.view({rows, 1, half});
  at::Tensor want = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2).to(GetParam()).view({rows, heads * d});
  at::Tensor rest = qkv.narrow(1, heads * d, 4 * d).clone();
  RotaryInPlace(qkv, heads, d, cos, sin);
  ExpectClose(qkv.narrow(1, 0, heads * d), want, "rotary");
  EXPECT_TRUE(at::equal(qkv.narrow(1, heads * d, 4 * d), rest)) << "rotary wrote past its heads";
}

TEST_P(CudaFusedTest, SiluMulEqualsAten) {
  at::manual_seed(3);
  const int64_t rows = 4, inter = 1000;
  at::Tensor gate_up = at::randn({rows, 2 * inter}, Opts()) * 4;
  at::Tensor want = at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
  ExpectClose(SiluMul(gate_up), want, "silu mul");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFusedTest, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return info.param == at::kFloat ? "f32" : "bf16"; });

}  // namespace
}  // namespace shardlm::kernels
