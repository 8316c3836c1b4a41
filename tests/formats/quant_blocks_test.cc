// Quantizing at load (formats/quant_blocks.h, QuantizeBlocks): each format's
// blocks (the K-quants' too) dequantize back within its rounding step, and the
// f16 conversion rounds to nearest even.
#include "formats/quant_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace shardlm {
namespace {

std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  return x;
}

// Max |x - dequantize(quantize(x))| / the block's step, and the mean relative error.
struct Error {
  double max_steps = 0, mean_rel = 0;
};

Error RoundTrip(BlockFormat f, const std::vector<float>& x) {
  const BlockLayout l = BlockLayoutOf(f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> blocks(n / l.elements * l.bytes);
  QuantizeBlocks(f, x.data(), n, blocks.data());
  std::vector<float> back(n);
  DequantizeBlocks(f, blocks.data(), n, back.data());
  Error e;
  double abs_err = 0, abs_x = 0;
  for (int64_t b = 0; b < n / l.elements; ++b) {
    float lo = x[b * 32], hi = x[b * 32], amax = 0;
    for (int j = 0; j < 32; ++j) {
      lo = std::min(lo, x[b * 32 + j]);
      hi = std::max(hi, x[b * 32 + j]);
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
    }
    const double step = f == BlockFormat::kQ8_0   ? amax / 127.0
                        : f == BlockFormat::kQ4_0 ? amax / 8.0
                                                  : (hi - lo) / 15.0;
    for (int j = 0; j < 32; ++j) {
      const double err = std::fabs(x[b * 32 + j] - back[b * 32 + j]);
      e.max_steps = std::max(e.max_steps, err / step);
      abs_err += err;
      abs_x += std::fabs(x[b * 32 + j]);
    }
  }
  e.mean_rel = abs_err / abs_x;
  return e;
}

TEST(QuantizeBlocksTest, RoundTripsWithinTheFormatsStep) {
  const std::vector<float> x = Gaussian(32 * 64, 1);
  // Half a step, plus the f16 rounding of the scale (and of Q4_1's minimum).
  const Error q8 = RoundTrip(BlockFormat::kQ8_0, x);
  EXPECT_LE(q8.max_steps, 0.52);
  EXPECT_LT(q8.mean_rel, 0.01);
  // Q4_0 maps the largest magnitude to -8 steps: the other sign reaches only +7, so an element
  // there may be a whole step off.
  const Error q40 = RoundTrip(BlockFormat::kQ4_0, x);
  EXPECT_LE(q40.max_steps, 1.02);
  EXPECT_LT(q40.mean_rel, 0.12);
  const Error q41 = RoundTrip(BlockFormat::kQ4_1, x);
  EXPECT_LE(q41.max_steps, 0.55);
  EXPECT_LT(q41.mean_rel, 0.10);
}

// The K-quants' min/max quantizer: the largest error in units of the
// sub-block's step (its range over the levels, its minimum at most 0; Q6_K:
// its 16's largest magnitude over 31), which the 6-bit (Q6_K: 8-bit) rounding
// of each sub-block's step and minimum to the super-block's grid lets exceed
// half a step, and the mean relative error.
Error RoundTripK(BlockFormat f, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> blocks(n / 256 * BlockLayoutOf(f).bytes);
  QuantizeBlocks(f, x.data(), n, blocks.data());
  std::vector<float> back(n);
  DequantizeBlocks(f, blocks.data(), n, back.data());
  const int sub = f == BlockFormat::kQ6_K ? 16 : 32;
  const double levels = f == BlockFormat::kQ4_K ? 15 : 31;
  Error e;
  double abs_err = 0, abs_x = 0;
  for (int64_t b = 0; b < n / sub; ++b) {
    float lo = 0, hi = x[b * sub], amax = 0;
    for (int j = 0; j < sub; ++j) {
      lo = std::min(lo, x[b * sub + j]);
      hi = std::max(hi, x[b * sub + j]);
      amax = std::max(amax, std::fabs(x[b * sub + j]));
    }
    const double step = f == BlockFormat::kQ6_K ? amax / 31.0 : (hi - lo) / levels;
    for (int j = 0; j < sub; ++j) {
      const double err = std::fabs(x[b * sub + j] - back[b * sub + j]);
      e.max_steps = std::max(e.max_steps, err / step);
      abs_err += err;
      abs_x += std::fabs(x[b * sub + j]);
    }
  }
  e.mean_rel = abs_err / abs_x;
  return e;
}

TEST(QuantizeBlocksTest, KQuantsRoundTripNearTheirSubBlocksStep) {
  const std::vector<float> x = Gaussian(256 * 64, 2);
  const Error q4k = RoundTripK(BlockFormat::kQ4_K, x);
  const Error q5k = RoundTripK(BlockFormat::kQ5_K, x);
  const Error q6k = RoundTripK(BlockFormat::kQ6_K, x);
  std::printf("max steps / mean relative error: Q4_K %.3f / %.4f, Q5_K %.3f / %.4f, Q6_K %.3f / %.4f\n",
              q4k.max_steps, q4k.mean_rel, q5k.max_steps, q5k.mean_rel, q6k.max_steps, q6k.mean_rel);
  // Measured: 0.504 / 0.0832, 0.543 / 0.0407, 0.503 / 0.0201 (Q4_1 on such data: under 0.10).
  EXPECT_LE(q4k.max_steps, 0.6);
  EXPECT_LT(q4k.mean_rel, 0.09);
  EXPECT_LE(q5k.max_steps, 0.6);
  EXPECT_LT(q5k.mean_rel, 0.045);
  EXPECT_LE(q6k.max_steps, 0.55);
  EXPECT_LT(q6k.mean_rel, 0.022);
}

TEST(QuantizeBlocksTest, ZeroBlocksStayZero) {
  std::vector<float> x(512, 0.0f);
  for (BlockFormat f : {BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1, BlockFormat::kQ4_K,
                        BlockFormat::kQ5_K, BlockFormat::kQ6_K}) {
    const BlockLayout l = BlockLayoutOf(f);
    std::vector<uint8_t> blocks(512 / l.elements * l.bytes);
    QuantizeBlocks(f, x.data(), 512, blocks.data());
    std::vector<float> back(512, 1.0f);
    DequantizeBlocks(f, blocks.data(), 512, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f) << BlockFormatName(f);
  }
}

TEST(FloatToHalfTest, RoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);               // rounds past the largest half: infinity
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);     // a tie: to the even mantissa
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);     // a tie: to the even mantissa
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  for (uint16_t h : {0x0001, 0x03ff, 0x0400, 0x3555, 0x7bff, 0x8001, 0xbc00}) {
    EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h) << h;
  }
}

}  // namespace
}  // namespace shardlm
