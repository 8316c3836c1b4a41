// The GPU's planes (kernels/cuda/quant_planes.h) and the unpacking its
// kernels run (kernels/cuda/quant_block.h), on the host: every format the
// planes take, random GGUF blocks repacked, each block read back from the
// planes as the kernels read it (its words at the kernels' offsets), unpacked
// and scaled by the same code the GPU compiles, must give the file's
// dequantization (formats/quant_blocks.h, bit for bit gguf-py's) bit for bit.
// What this cannot check (the device's loads, the warp's sums) is
// tests/kernels/cuda_quant_gemv_check.cu's, on a GPU.
#include "kernels/cuda/quant_planes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "formats/quant_blocks.h"
#include "kernels/cuda/quant_block.h"

namespace shardlm::kernels::cuda {
namespace {

// n rows of k weights in random blocks: every quant bit random, the f16
// fields finite, of both signs, one in seven subnormal.
std::vector<uint8_t> RandomBlocks(BlockFormat f, int64_t n, int64_t k, std::mt19937& rng) {
  const BlockLayout layout = BlockLayoutOf(f);
  const int64_t count = n * (k / layout.elements);
  std::vector<uint8_t> out(static_cast<size_t>(count * layout.bytes));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> scale(0.0f, 0.05f);
  for (int64_t b = 0; b < count; ++b) {
    for (int off : HalfFieldOffsets(f)) {
      const uint16_t bits = b % 7 == 3 ? static_cast<uint16_t>(0x0032 | (rng() & 0x8000u))  // subnormal
                                       : FloatToHalf(scale(rng));
      std::memcpy(out.data() + b * layout.bytes + off, &bits, 2);
    }
  }
  return out;
}

// Block `at` read from the planes as quant_gemv.cu's LoadBits reads it.
BlockBits BitsAt(BlockFormat f, const uint8_t* planes, const QuantPlanes& p, int64_t at) {
  BlockBits v{};
  std::memcpy(v.lo, planes + p.quants + QuantBytes(f) * at, static_cast<size_t>(QuantBytes(f)));
  if (HighBytes(f) > 0)
    std::memcpy(v.hi, planes + p.high + HighBytes(f) * at, static_cast<size_t>(HighBytes(f)));
  return v;
}

// The [n, k] weight as the kernels' dequantization (QuantRowsKernel) gives it.
template <BlockFormat F>
std::vector<float> FromPlanes(const std::vector<uint8_t>& planes, int64_t n, int64_t k) {
  const QuantPlanes p = QuantPlanesOf(F, n, k);
  const auto* d = reinterpret_cast<const uint16_t*>(planes.data() + p.d);
  const auto* m = p.m >= 0 ? reinterpret_cast<const uint16_t*>(planes.data() + p.m) : nullptr;
  const uint8_t* sc = p.sc >= 0 ? planes.data() + p.sc : nullptr;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (int64_t at = 0; at < n * (k / 32); ++at) {
    float q[32];
    UnpackQuants<F>(BitsAt(F, planes.data(), p, at), q);
    const BlockScales s = ScalesAt<F>(d, m, sc, at);
    for (int i = 0; i < 32; ++i) {
      const float value = (i < 16 ? s.d0 : s.d1) * q[i];
      w[static_cast<size_t>(32 * at + i)] = HasMinimum(F) ? value + s.mn : value;
    }
  }
  return w;
}

std::vector<float> FromPlanesOf(BlockFormat f, const std::vector<uint8_t>& planes, int64_t n, int64_t k) {
  switch (f) {
    case BlockFormat::kQ8_0:
      return FromPlanes<BlockFormat::kQ8_0>(planes, n, k);
    case BlockFormat::kQ4_0:
      return FromPlanes<BlockFormat::kQ4_0>(planes, n, k);
    case BlockFormat::kQ4_1:
      return FromPlanes<BlockFormat::kQ4_1>(planes, n, k);
    case BlockFormat::kQ5_0:
      return FromPlanes<BlockFormat::kQ5_0>(planes, n, k);
    case BlockFormat::kQ5_1:
      return FromPlanes<BlockFormat::kQ5_1>(planes, n, k);
    case BlockFormat::kQ4_K:
      return FromPlanes<BlockFormat::kQ4_K>(planes, n, k);
    case BlockFormat::kQ5_K:
      return FromPlanes<BlockFormat::kQ5_K>(planes, n, k);
    case BlockFormat::kQ6_K:
      return FromPlanes<BlockFormat::kQ6_K>(planes, n, k);
    default:
      ADD_FAILURE() << "no planes for " << BlockFormatName(f);
      return {};
  }
}

class QuantPlanesTest : public ::testing::TestWithParam<BlockFormat> {};

TEST_P(QuantPlanesTest, EveryBlockUnpacksToTheFilesWeights) {
  const BlockFormat f = GetParam();
  ASSERT_TRUE(GpuQuantFormat(f));
  std::mt19937 rng(static_cast<uint32_t>(f) + 11);
  const int64_t n = 5, k = 768;  // three K-quant super-blocks, 24 blocks of 32 a row
  const std::vector<uint8_t> rows = RandomBlocks(f, n, k, rng);
  std::vector<float> want(static_cast<size_t>(n * k));
  const int64_t row_bytes = k / BlockLayoutOf(f).elements * BlockLayoutOf(f).bytes;
  for (int64_t r = 0; r < n; ++r) DequantizeBlocks(f, rows.data() + r * row_bytes, k, want.data() + r * k);

  const QuantPlanes p = QuantPlanesOf(f, n, k);
  // Every plane starts 256-byte aligned, inside the storage, after the one before it.
  for (int64_t at : {p.quants, p.high, p.d, p.m, p.sc}) {
    if (at < 0) continue;
    EXPECT_EQ(at % 256, 0);
    EXPECT_LT(at, p.bytes);
  }
  EXPECT_EQ(p.high >= 0, HighBytes(f) > 0);
  EXPECT_EQ(p.m >= 0, HasMinimum(f));
  EXPECT_EQ(p.sc >= 0, IsKQuant(f));
  std::vector<uint8_t> planes(static_cast<size_t>(p.bytes), 0xAB);
  RepackToPlanes(f, rows.data(), n, k, planes.data());
  const std::vector<float> got = FromPlanesOf(f, planes, n, k);
  ASSERT_EQ(got.size(), want.size());
  int64_t differ = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << "first at weight " << first << ": " << (first >= 0 ? got[first] : 0.0f)
                       << " against " << (first >= 0 ? want[first] : 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantPlanesTest,
                         ::testing::Values(BlockFormat::kQ8_0, BlockFormat::kQ4_0, BlockFormat::kQ4_1,
                                           BlockFormat::kQ5_0, BlockFormat::kQ5_1, BlockFormat::kQ4_K,
                                           BlockFormat::kQ5_K, BlockFormat::kQ6_K),
                         [](const auto& info) { return std::string(BlockFormatName(info.param)); });

// The formats the planes refuse: Q2_K and Q3_K are dequantized at load.
TEST(QuantPlanesFormats, TheCpusKeptFormatsAndNoOthers) {
  for (BlockFormat f : {BlockFormat::kNone, BlockFormat::kQ2_K, BlockFormat::kQ3_K})
    EXPECT_FALSE(GpuQuantFormat(f));
}

}  // namespace
}  // namespace shardlm::kernels::cuda
