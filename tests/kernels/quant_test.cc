// The quantized products (kernels/cpu/quant.h through kernels::Linear), for
// every format a kernel keeps (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K):
// against an f32 product of the file's dequantized weight, within the bound
// the activations' 8-bit rounding allows; the AVX-512 VNNI kernel against the
// portable loop bit for bit; rows of a tied head as the file dequantizes them;
// the residual add; shapes with a short last panel.
#include "kernels/cpu/quant.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/quant_blocks.h"
#include "kernels/cpu/isa.h"
#include "kernels/linear.h"

namespace shardlm::kernels {
namespace {

// IEEE half bits of a small float (normal range only; the test's scales are).
uint16_t ToHalf(float f) {
  at::Tensor t = at::tensor({f}).to(at::kHalf);
  uint16_t h;
  std::memcpy(&h, t.data_ptr(), 2);
  return h;
}

// n random rows of k weights in GGUF blocks, and the same weights in f32 as
// the file's dequantization (formats/quant_blocks.h, bit for bit gguf-py's)
// gives them.
struct Rows {
  at::Tensor bytes;  // uint8[n, k / unit * block bytes]
  at::Tensor dense;  // f32[n, k]
};

Rows RandomRows(BlockFormat f, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  const BlockLayout layout = BlockLayoutOf(f);
  const int64_t blocks = k / layout.elements, row_bytes = blocks * layout.bytes;
  Rows r{at::empty({n, row_bytes}, at::kByte), at::empty({n, k}, at::kFloat)};
  uint8_t* b = r.bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n * row_bytes; ++i) b[i] = static_cast<uint8_t>(byte(rng));
  const bool k_quant = layout.elements == 256;
  for (int64_t bl = 0; bl < n * blocks; ++bl) {
    uint8_t* blk = b + bl * layout.bytes;
    const std::vector<int> halves = HalfFieldOffsets(f);
    for (size_t h = 0; h < halves.size(); ++h) {
      // K-quant super-block scales multiply 6-bit sub-block scales; Q4_1/Q5_1's minimum is negative.
      const float v = k_quant ? scale(rng) / 32 : h == 1 ? -scale(rng) * 8 : scale(rng);
      const uint16_t bits = ToHalf(v);
      std::memcpy(blk + halves[h], &bits, 2);
    }
  }
  for (int64_t o = 0; o < n; ++o) {
    DequantizeBlocks(f, b + o * row_bytes, k, r.dense.data_ptr<float>() + o * k);
  }
  return r;
}

// |x w^T - the quantized product| may be up to sum_j |w_j| * dx_j / 2 (each
// activation rounded to its block's step dx = max|x| / 127), plus f32
// rounding of the sums.
at::Tensor Bound(const at::Tensor& x, const at::Tensor& w) {
  const int64_t m = x.size(0), k = x.size(1);
  at::Tensor step = x.abs().view({m, k / 32, 32}).amax(2) / 127.0;  // [m, blocks]
  at::Tensor half_step = step.repeat_interleave(32, 1) / 2;         // [m, k]
  return at::matmul(half_step, w.abs().t()) * 1.001 + 1e-5;
}

class QuantLinearTest : public ::testing::TestWithParam<BlockFormat> {};

TEST_P(QuantLinearTest, MatchesTheDequantizedProductWithinTheActivationRounding) {
  const BlockFormat f = GetParam();
  const int64_t unit = QuantUnit(f);
  for (int64_t n : {16, 37, 80}) {
    for (int64_t k : {unit, 3 * unit, unit == 256 ? 7 * unit : 18 * unit}) {
      const Rows rows = RandomRows(f, n, k, static_cast<uint32_t>(n * 1000 + k));
      const LinearWeight w = LinearWeight::PrepareQuantized(f, rows.bytes, k);
      ASSERT_TRUE(w.quantized());
      EXPECT_EQ(w.nbytes(), QuantPackedBytes(f, n, k));
      for (int64_t m : {1, 3, 8, 11, 20}) {
        at::manual_seed(m * 7 + n);
        const at::Tensor x = at::randn({m, k});
        const at::Tensor bias = at::randn({n});
        const at::Tensor got = Linear(x, w, bias);
        const at::Tensor want = at::matmul(x, rows.dense.t()) + bias;
        const at::Tensor excess = (got - want).abs() - Bound(x, rows.dense);
        EXPECT_LE(excess.max().item<float>(), 0.0f)
            << BlockFormatName(f) << " n " << n << " k " << k << " m " << m;
      }
    }
  }
}

// y through the kernel of `isa` (capped as SHARDLM_CPU_ISA would), or with
// kAddTo into a copy of y0.
at::Tensor LinearAt(Isa isa, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias,
                    const at::Tensor& y0) {
  const Isa before = CapIsa(isa);
  at::Tensor y;
  if (y0.defined()) {
    y = y0.clone();
    LinearAddTo(y, x, w, bias);
  } else {
    y = Linear(x, w, bias);
  }
  CapIsa(before);
  return y;
}

TEST_P(QuantLinearTest, SimdKernelsEqualThePortableLoopBitForBit) {
  const BlockFormat f = GetParam();
  std::vector<Isa> simd;
  if (DetectedIsa() == Isa::kAvx512 && HasAvx512Vnni()) simd.push_back(Isa::kAvx512);
  if (DetectedIsa() >= Isa::kAvx2) simd.push_back(Isa::kAvx2);
  if (simd.empty()) GTEST_SKIP() << "no AVX2 here";
  // Last panels of 5 rows (53) and of 13 (45: AVX2's second half-panel short).
  const int64_t unit = QuantUnit(f);
  for (const auto& [n, k] :
       {std::pair<int64_t, int64_t>{53, 6 * unit / (unit == 256 ? 2 : 1)}, {45, 3 * unit}}) {
    const Rows rows = RandomRows(f, n, k, static_cast<uint32_t>(7 + n));
    const LinearWeight w = LinearWeight::PrepareQuantized(f, rows.bytes, k);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      for (int64_t m : {1, 2, 5, 8, 9, 33}) {
        at::manual_seed(m);
        const at::Tensor x = at::randn({m, k}).to(dtype);
        const at::Tensor bias = at::randn({n}).to(dtype);
        const at::Tensor y0 = at::randn({m, n}).to(dtype);
        for (const at::Tensor& y : {at::Tensor(), y0}) {
          const at::Tensor slow = LinearAt(Isa::kScalar, x, w, bias, y);
          for (Isa isa : simd) {
            EXPECT_TRUE(at::equal(LinearAt(isa, x, w, bias, y), slow))
                << BlockFormatName(f) << " " << IsaName(isa) << " m " << m << " " << dtype
                << (y.defined() ? " add-to" : "") << " n " << n;
          }
        }
      }
    }
  }
}

TEST_P(QuantLinearTest, RowsAreTheFilesValues) {
  const BlockFormat f = GetParam();
  const int64_t k = 2 * QuantUnit(f);
  const Rows rows = RandomRows(f, 37, k, 3);
  const LinearWeight w = LinearWeight::PrepareQuantized(f, rows.bytes, k);
  const at::Tensor index = at::tensor({0, 36, 17, 16, 99, -1}, at::kLong);
  const at::Tensor got = w.Rows(index);
  const at::Tensor want = rows.dense.index_select(0, index.clamp(0, 36));
  EXPECT_TRUE(at::equal(got, want));
}

TEST_P(QuantLinearTest, AddToAddsTheRoundedProduct) {
  const BlockFormat f = GetParam();
  const int64_t k = 4 * QuantUnit(f);
  const Rows rows = RandomRows(f, 40, k, 5);
  const LinearWeight w = LinearWeight::PrepareQuantized(f, rows.bytes, k);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor x = at::randn({5, k}).to(dtype);
    const at::Tensor y0 = at::randn({5, 40}).to(dtype);
    at::Tensor y = y0.clone();
    LinearAddTo(y, x, w);
    EXPECT_TRUE(at::equal(y, y0 + Linear(x, w))) << dtype;
  }
}

TEST(QuantLinearShapes, RejectsRowsThatAreNotWholeBlocks) {
  const Rows rows = RandomRows(BlockFormat::kQ8_0, 4, 64, 1);
  EXPECT_THROW(LinearWeight::PrepareQuantized(BlockFormat::kQ8_0, rows.bytes, 48), c10::Error);
  EXPECT_THROW(LinearWeight::PrepareQuantized(BlockFormat::kQ4_0, rows.bytes, 64), c10::Error);
  // A K-quant's rows are whole super-blocks of 256.
  const Rows k_rows = RandomRows(BlockFormat::kQ4_K, 4, 512, 1);
  EXPECT_THROW(LinearWeight::PrepareQuantized(BlockFormat::kQ4_K, k_rows.bytes, 480), c10::Error);
  EXPECT_THROW(LinearWeight::PrepareQuantized(BlockFormat::kQ3_K, k_rows.bytes, 512), c10::Error);
}

// The packed bytes are the file's, but for the K-quants' unpacked scales.
TEST(QuantLinearShapes, PackedBytesAreAboutTheFiles) {
  EXPECT_EQ(QuantPackedBytes(BlockFormat::kQ4_0, 16, 32), 16 * 18);
  EXPECT_EQ(QuantPackedBytes(BlockFormat::kQ5_1, 16, 32), 16 * 24);
  EXPECT_EQ(QuantPackedBytes(BlockFormat::kQ6_K, 16, 256), 16 * 210);
  EXPECT_EQ(QuantPackedBytes(BlockFormat::kQ4_K, 16, 256), 16 * 144 + 64);
  EXPECT_EQ(QuantPackedBytes(BlockFormat::kQ5_K, 17, 512), 2 * 2 * (16 * 176 + 64));
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantLinearTest,
                         ::testing::Values(BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1,
                                           BlockFormat::kQ5_0, BlockFormat::kQ5_1, BlockFormat::kQ4_K,
                                           BlockFormat::kQ5_K, BlockFormat::kQ6_K),
                         [](const ::testing::TestParamInfo<BlockFormat>& p) {
                           return std::string(BlockFormatName(p.param));
                         });

}  // namespace
}  // namespace shardlm::kernels
