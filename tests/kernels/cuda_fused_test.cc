// kernels/fused.h and kernels/linear.h on CUDA tensors (the CUDA variant's
// element-wise kernels, kernels/cuda/elementwise.cu, and few-row products,
// kernels/cuda/gemv.cu) against the ATen operators they replace, on the same
// GPU: RMSNorm over strided rows, rotary in place on a view into a qkv
// projection, rotary with the KV write, SiLU x up, and products of 1 to 9 rows
// (stored, added to a residual, SwiGLU), in f32 and bf16; and weights kept in
// GGUF blocks of every format the GPU keeps (Q8_0 to Q6_K;
// LinearWeight::PrepareGpuQuantized, the few-row product of
// kernels/cuda/quant_gemv.h, 8 rows a launch, and the dequantized path past
// CudaQuantMaxRows), alone and in segments of two formats, against their host
// dequantization. Skipped without a GPU; in the CPU build
// the same calls take the ATen path and the test still holds.
#include "kernels/cuda_fused.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "formats/quant_blocks.h"
#include "kernels/cuda/quant_planes.h"
#include "kernels/fused.h"
#include "kernels/linear.h"

namespace shardlm::kernels {
namespace {

class CudaFusedTest : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (at::detail::getCUDAHooks().getNumGPUs() == 0) GTEST_SKIP() << "no GPU";
    SetCudaGemvMaxRows(8);  // every row count the kernel has
  }
  void TearDown() override { SetCudaGemvMaxRows(kDefaultCudaGemvMaxRows); }
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

TEST_P(CudaFusedTest, RotaryKvWritesSlots) {
  at::manual_seed(4);
  const int64_t rows = 3, heads = 4, kv_heads = 2, d = 64, half = d / 2;
  at::Tensor qkv =
      at::randn({rows, (heads + 2 * kv_heads) * d + 8}, Opts()).narrow(1, 0, (heads + 2 * kv_heads) * d);
  at::Tensor cos = at::rand({rows, half}, Opts().dtype(at::kFloat)),
             sin = at::rand({rows, half}, Opts().dtype(at::kFloat));
  at::Tensor k_layer = at::zeros({4, 4, kv_heads, d}, Opts()),
             v_layer = at::zeros({4, 4, kv_heads, d}, Opts());
  at::Tensor slots =
      at::tensor(std::vector<int64_t>{5, 0, 13}, at::TensorOptions().dtype(at::kLong)).to(at::kCUDA);
  at::Tensor want = qkv.clone();
  RotaryInPlace(want, heads + kv_heads, d, cos, sin);
  ASSERT_TRUE(CudaRotaryKvInPlace(qkv, heads, kv_heads, d, cos, sin, slots, k_layer, v_layer));
  EXPECT_TRUE(at::equal(qkv, want)) << "q, k rotated as RotaryInPlace rotates them; v untouched";
  at::Tensor k_rows = k_layer.view({16, kv_heads * d}), v_rows = v_layer.view({16, kv_heads * d});
  EXPECT_TRUE(at::equal(k_rows.index_select(0, slots), want.narrow(1, heads * d, kv_heads * d)));
  EXPECT_TRUE(at::equal(v_rows.index_select(0, slots), want.narrow(1, (heads + kv_heads) * d, kv_heads * d)));
  EXPECT_EQ(k_rows.abs().sum(1).ne(0).sum().item<int64_t>(), 3) << "only the three slots written";
  EXPECT_EQ(v_rows.abs().sum(1).ne(0).sum().item<int64_t>(), 3);
}

// x @ w^T in f64 from the same (rounded) values, then rounded to the dtype; and
// the bound on the f32 sum's rounding: a few ulps of sum |x| |w|.
struct Reference {
  at::Tensor value, bound;
};
Reference LinearReference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  at::Tensor xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  at::Tensor v = at::linear(xd, wd, bias.defined() ? bias.to(at::kDouble) : at::Tensor());
  return {v, at::linear(xd.abs(), wd.abs()) * 1e-6};
}

TEST_P(CudaFusedTest, FewRowProductsEqualF64) {
  at::manual_seed(5);
  const int64_t n = 37;                       // not a whole number of blocks
  for (const int64_t k : {64, 4096, 1004}) {  // 1004: whole 16-byte vectors in f32, not in bf16
    for (int64_t rows = 1; rows <= 9; ++rows) {
      SCOPED_TRACE(testing::Message() << "k " << k << " rows " << rows);
      at::Tensor x = at::randn({rows, k}, Opts()), w = at::randn({n, k}, Opts()),
                 bias = at::randn({n}, Opts());
      // The kernel runs for 1 to 8 rows of whole 16-byte vectors, bias or not; cuBLAS
      // (which may reduce in bf16) takes the rest.
      const bool taken = rows <= 8 && (k * x.element_size()) % 16 == 0;
      EXPECT_EQ(CudaLinear(x, w, bias).defined(), taken);
      if (!taken) continue;
      const Reference ref = LinearReference(x, w, bias);
      at::Tensor got = Linear(x, w, bias).to(at::kDouble);
      at::Tensor err = (got - ref.value).abs();
      // bf16: the output's rounding (half an ulp, 2^-9 relative) plus the sum's.
      at::Tensor tol =
          GetParam() == at::kFloat ? ref.bound : ref.value.abs() * std::ldexp(1.0, -8) + ref.bound;
      EXPECT_TRUE(err.le(tol).all().item<bool>()) << "max |diff| " << err.max().item<double>();

      // y += x @ w^T, the product rounded first.
      at::Tensor y = at::randn({rows, n}, Opts()), y0 = y.clone();
      LinearAddTo(y, x, LinearWeight::Prepare(w), bias);
      at::Tensor want = y0.to(at::kDouble) + Linear(x, w, bias).to(at::kDouble);
      at::Tensor add_err = (y.to(at::kDouble) - want).abs();
      at::Tensor add_tol =
          GetParam() == at::kFloat ? tol * 2 + 1e-6 * want.abs() : tol + want.abs() * std::ldexp(1.0, -8);
      EXPECT_TRUE(add_err.le(add_tol).all().item<bool>())
          << "add: max |diff| " << add_err.max().item<double>();
    }
  }
}

TEST_P(CudaFusedTest, FewRowSwiGluEqualsAten) {
  at::manual_seed(6);
  const int64_t inter = 300, k = 512;
  for (int64_t rows = 1; rows <= 9; ++rows) {
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    at::Tensor x = at::randn({rows, k}, Opts()) * 0.2, gate_up = at::randn({2 * inter, k}, Opts()) * 0.2;
    EXPECT_EQ(CudaLinearSwiGlu(x, gate_up).defined(), rows <= 8);
    if (rows > 8) continue;
    at::Tensor got = LinearSwiGlu(x, LinearWeight::PrepareGated(gate_up)).to(at::kDouble);
    // silu(g) * u from f64 products: within the products' roundings and the two after them.
    const Reference ref = LinearReference(x, gate_up, at::Tensor());
    at::Tensor g = ref.value.narrow(1, 0, inter), u = ref.value.narrow(1, inter, inter);
    at::Tensor want = g * at::sigmoid(g) * u;
    at::Tensor err = (got - want).abs();
    const double rel = GetParam() == at::kFloat ? 1e-5 : std::ldexp(1.0, -6);
    at::Tensor tol = want.abs() * rel + (u.abs() + g.abs()) * ref.bound.narrow(1, 0, inter) * 4 + 1e-6;
    EXPECT_TRUE(err.le(tol).all().item<bool>()) << "max |diff| " << err.max().item<double>();
  }
}

// A weight in `format`'s blocks and its host dequantization, f32[n, k] on
// the CPU: the host's quantizer over random f32 for the formats it makes
// (Q8_0, Q4_0, Q4_1), random blocks with small scales for the others.
struct BlockWeight {
  at::Tensor rows;   // uint8[n, k / unit * block bytes]
  at::Tensor dense;  // f32[n, k]
};
BlockWeight RandomBlocks(BlockFormat format, int64_t n, int64_t k) {
  const BlockLayout layout = BlockLayoutOf(format);
  const int64_t row_bytes = k / layout.elements * layout.bytes;
  BlockWeight b{at::empty({n, row_bytes}, at::kByte), at::empty({n, k}, at::kFloat)};
  const bool made =
      format == BlockFormat::kQ8_0 || format == BlockFormat::kQ4_0 || format == BlockFormat::kQ4_1;
  if (made) {
    at::Tensor w = at::randn({n, k}) * 0.2;
    for (int64_t i = 0; i < n; ++i)
      QuantizeBlocks(format, w[i].data_ptr<float>(), k, b.rows[i].data_ptr<uint8_t>());
  } else {
    b.rows.copy_(at::randint(0, 256, {n, row_bytes}, at::kLong).to(at::kByte));
    // Weights of about 0.2 at most: the scale over the largest quant (times the
    // largest sub-block scale for the K-quants).
    const float d = format == BlockFormat::kQ6_K ? 0.2f / (128 * 32)
                    : IsKQuant(format)           ? 0.2f / (63 * 31)
                                                 : 0.2f / 16;
    const std::vector<int> halves = HalfFieldOffsets(format);
    uint8_t* p = b.rows.data_ptr<uint8_t>();
    for (int64_t blk = 0; blk < n * (k / layout.elements); ++blk) {
      for (size_t h = 0; h < halves.size(); ++h) {
        const float v = (h == 1 && !IsKQuant(format) ? -4.0f : 1.0f) * d * (0.5f + (blk % 5) * 0.25f);
        const uint16_t bits = FloatToHalf(blk % 3 == 0 && h == 0 ? -v : v);
        std::memcpy(p + blk * layout.bytes + halves[h], &bits, 2);
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    DequantizeBlocks(format, b.rows[i].data_ptr<uint8_t>(), k, b.dense[i].data_ptr<float>());
  }
  return b;
}

// Linear, LinearAddTo and LinearSwiGlu (its [gate; up] halves of n / 2) over
// a weight kept in blocks, for each count of rows, against f64 products of its
// host dequantization w64 [n, k]. f32: the products' sums in another order;
// bf16: the output rounded to bf16, and past the few-row product the weight too.
void ExpectProductsOfBlocks(const LinearWeight& lw, const at::Tensor& w64,
                            std::initializer_list<int64_t> counts, at::ScalarType dtype) {
  const int64_t n = w64.size(0), k = w64.size(1);
  const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
  auto expect_close = [&](const at::Tensor& got, const at::Tensor& want, const char* what) {
    const double scale = want.abs().max().item<double>();
    const double diff = (got.to(at::kDouble).cpu() - want).abs().max().item<double>();
    EXPECT_LE(diff, dtype == at::kFloat ? 1e-5 * scale : std::ldexp(scale, -6)) << what;
  };
  const at::Tensor bias = at::randn({n}, opts);
  for (int64_t rows : counts) {
    SCOPED_TRACE(testing::Message() << "rows " << rows);
    at::Tensor x = at::randn({rows, k}, opts);
    const at::Tensor x64 = x.to(at::kDouble).cpu();
    const at::Tensor product = at::matmul(x64, w64.t());
    const at::Tensor want = product + bias.to(at::kDouble).cpu();
    expect_close(Linear(x, lw, bias), want, "linear");
    at::Tensor y = at::randn({rows, n}, opts);
    const at::Tensor y0 = y.to(at::kDouble).cpu();
    LinearAddTo(y, x, lw, bias);
    expect_close(y, y0 + want, "add to");
    const at::Tensor g = product.narrow(1, 0, n / 2), u = product.narrow(1, n / 2, n / 2);
    expect_close(LinearSwiGlu(x, lw), g * at::sigmoid(g) * u, "swiglu");
  }
}

TEST_P(CudaFusedTest, WeightsKeptInBlocksEqualTheirDequantization) {
  at::manual_seed(7);
  const int64_t n = 200, k = 512;
  for (BlockFormat format :
       {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1, BlockFormat::kQ5_0, BlockFormat::kQ5_1,
        BlockFormat::kQ4_K, BlockFormat::kQ5_K, BlockFormat::kQ6_K}) {
    SCOPED_TRACE(BlockFormatName(format));
    const BlockWeight b = RandomBlocks(format, n, k);
    const LinearWeight lw = LinearWeight::PrepareGpuQuantized(format, b.rows, k, at::Device(at::kCUDA));
    ASSERT_EQ(lw.gpu_format(), format);
    ExpectProductsOfBlocks(lw, b.dense.to(at::kDouble), {1, 3, 8, 9, 20, 80}, GetParam());
    // Rows looked up (a tied embedding): the host's dequantization, in f32.
    const at::Tensor index = at::tensor({5, 0, 199, 5}, at::kLong).to(at::kCUDA);
    const at::Tensor got = lw.Rows(index).cpu();
    EXPECT_TRUE(at::allclose(got, b.dense.index_select(0, index.cpu()), 1e-6, 0)) << "rows";
  }
}

// A weight whose parts differ in format (a Q4_K_M file's q and k in Q4_K, v
// in Q6_K): one segment per run of a format, one launch each into its
// columns; gate/up in two formats takes the product and then SiLU(gate) * up.
TEST_P(CudaFusedTest, WeightsInSegmentsOfFormatsEqualTheirDequantization) {
  at::manual_seed(11);
  const int64_t k = 512;
  const BlockWeight a = RandomBlocks(BlockFormat::kQ4_K, 72, k), b = RandomBlocks(BlockFormat::kQ4_K, 48, k),
                    c = RandomBlocks(BlockFormat::kQ6_K, 80, k);
  const LinearWeight lw = LinearWeight::PrepareGpuQuantized(
      {{BlockFormat::kQ4_K, a.rows}, {BlockFormat::kQ4_K, b.rows}, {BlockFormat::kQ6_K, c.rows}}, k,
      at::Device(at::kCUDA));
  ASSERT_TRUE(lw.gpu_quantized());
  EXPECT_EQ(lw.gpu_format(), BlockFormat::kNone);
  ASSERT_EQ(lw.quant_segments().size(), 2u);
  EXPECT_EQ(lw.quant_segments()[1].row0, 120);
  EXPECT_EQ(lw.quant_segments()[1].offset % 256, 0);
  ExpectProductsOfBlocks(lw, at::cat({a.dense, b.dense, c.dense}, 0).to(at::kDouble), {1, 3, 8, 9, 41, 80},
                         GetParam());
  EXPECT_THROW(lw.Rows(at::tensor({0}, at::kLong).to(at::kCUDA)), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFusedTest, ::testing::Values(at::kFloat, at::kBFloat16),
                         [](const auto& info) { return info.param == at::kFloat ? "f32" : "bf16"; });

}  // namespace
}  // namespace shardlm::kernels
