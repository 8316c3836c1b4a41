#include "formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tests/testing/gguf_builder.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::GgufBuilder;
using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<GgufHeader> Parse(const std::string& image) {
  return ParseGguf(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "t.gguf");
}

GgufBuilder Small() {
  GgufBuilder b;
  b.String("general.architecture", "llama").U32("llama.block_count", 2).F32("llama.rope.freq_base", 1e4f);
  b.Bool("tokenizer.ggml.add_bos_token", true).Strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  b.I32s("tokenizer.ggml.token_type", {1, 1, 3});
  b.Tensor("output_norm.weight", {8}, GgmlType::kF32, GgufBuilder::F32Bytes(std::vector<float>(8, 1.0f)));
  b.Tensor("blk.0.ffn_up.weight", {64, 2}, GgmlType::kQ8_0, std::string(4 * 34, '\x01'));
  return b;
}

TEST(GgufTest, ParsesMetadataAndTensors) {
  const std::string image = Small().Build();
  auto h = Parse(image);
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->version, 3u);
  EXPECT_EQ(h->alignment, 32u);
  EXPECT_EQ(h->Find("general.architecture")->s, "llama");
  EXPECT_EQ(h->Find("llama.block_count")->i, 2);
  EXPECT_TRUE(h->Find("llama.block_count")->is_integer());
  EXPECT_FLOAT_EQ(h->Find("llama.rope.freq_base")->f, 1e4f);
  EXPECT_EQ(h->Find("tokenizer.ggml.add_bos_token")->i, 1);
  EXPECT_THAT(h->Find("tokenizer.ggml.tokens")->strings, ElementsAre("a", "b", "ab"));
  EXPECT_THAT(h->Find("tokenizer.ggml.token_type")->ints, ElementsAre(1, 1, 3));
  ASSERT_EQ(h->tensors.size(), 2u);
  const GgufTensorInfo& up = h->tensors[1];
  EXPECT_EQ(up.name, "blk.0.ffn_up.weight");
  EXPECT_THAT(up.dims, ElementsAre(64, 2));
  EXPECT_EQ(up.nbytes, 4u * 34);
  EXPECT_EQ(h->data_offset % 32, 0u);
  EXPECT_EQ(up.data, reinterpret_cast<const uint8_t*>(image.data()) + h->data_offset + up.offset);
  EXPECT_EQ(h->Find("absent"), nullptr);
}

TEST(GgufTest, RefusesWrongMagicAndVersions) {
  std::string image = Small().Build();
  std::string bad = image;
  bad[0] = 'X';
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic 'GGUF'")));
  bad = image;
  bad[4] = 0, bad[7] = 3;  // version 3 written big-endian
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big-endian")));
  bad = image;
  bad[4] = 1;
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 1")));
  EXPECT_THAT(Parse("GG"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inside the magic")));
}

TEST(GgufTest, EveryTruncationIsAClearError) {
  const std::string image = Small().Build();
  auto full = Parse(image);
  ASSERT_THAT(full, IsOk());
  // Cutting the file anywhere before the end of the last tensor fails with a named error.
  const size_t end = full->data_offset + full->tensors[1].offset + full->tensors[1].nbytes;
  for (size_t n = 0; n < end; ++n) {
    auto h = Parse(image.substr(0, n));
    ASSERT_FALSE(h.ok()) << "cut at " << n;
    EXPECT_THAT(h.status().message(), HasSubstr("t.gguf")) << "cut at " << n;
  }
}

// Offsets of fields in Small()'s image, found by searching for their bytes.
size_t Find(const std::string& image, const std::string& what) {
  size_t at = image.find(what);
  EXPECT_NE(at, std::string::npos) << what;
  return at;
}

TEST(GgufTest, RefusesLengthsCountsAndOffsetsPastTheFile) {
  const std::string image = Small().Build();
  {  // the first token string claims 2^40 bytes
    std::string bad = image;
    const size_t len_at = Find(image, std::string("\x01\0\0\0\0\0\0\0a", 9));
    bad[len_at + 5] = 1;
    EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("element 0 of 'tokenizer.ggml.tokens'")));
  }
  {  // the token array claims 2^33 elements
    std::string bad = image;
    const size_t count_at = Find(image, "tokenizer.ggml.tokens") + 21 + 8;  // key, value type, element type
    bad[count_at + 4] = 2;
    EXPECT_THAT(Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("declares 8589934595 elements")));
  }
  {  // the tensor count is huge
    std::string bad = image;
    bad[8 + 6] = 1;
    EXPECT_THAT(Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensors, more than the file")));
  }
}

TEST(GgufTest, RefusesBadTensors) {
  auto parse_one = [](const std::vector<uint64_t>& dims, GgmlType type, size_t bytes) {
    GgufBuilder b;
    b.Tensor("w", dims, type, std::string(bytes, '\0'));
    return Parse(b.Build());
  };
  EXPECT_THAT(
      parse_one({33, 2}, GgmlType::kQ4_1, 64),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a whole number of 32-element blocks")));
  EXPECT_THAT(parse_one({1, 1, 1, 1, 1}, GgmlType::kF32, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("5 dimensions")));
  EXPECT_THAT(parse_one({0}, GgmlType::kF32, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dimension 0 = 0")));
  EXPECT_THAT(parse_one({4}, static_cast<GgmlType>(99), 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ggml type 99")));
  // 16 f32 declared, 8 present (the builder pads to 32 bytes).
  EXPECT_THAT(
      parse_one({16}, GgmlType::kF32, 8),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("runs past the end of the data section")));
  GgufBuilder dup;
  dup.Tensor("w", {8}, GgmlType::kF32, std::string(32, '\0'))
      .Tensor("w", {8}, GgmlType::kF32, std::string(32, '\0'));
  EXPECT_THAT(Parse(dup.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'w' appears twice")));
}

TEST(GgufTest, RefusesMisalignedAndOverlappingTensors) {
  GgufBuilder b;
  b.Tensor("a", {8}, GgmlType::kF32, std::string(32, '\0'))
      .Tensor("b", {8}, GgmlType::kF32, std::string(32, '\0'));
  const std::string image = b.Build();
  const size_t b_offset_at =
      Find(image, std::string("\x01\0\0\0\0\0\0\0b", 9)) + 9 + 4 + 8 + 4;  // name, n_dims, dim, type
  std::string bad = image;
  bad[b_offset_at] = 16;  // 16: not a multiple of 32
  EXPECT_THAT(Parse(bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a multiple of the 32-byte")));
  bad = image;
  bad[b_offset_at] = 0;  // same bytes as 'a'
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
}

TEST(GgufTest, RefusesBadMetadata) {
  GgufBuilder dup;
  dup.U32("k", 1).U32("k", 2);
  EXPECT_THAT(Parse(dup.Build()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'k' appears twice")));
  GgufBuilder align;
  align.U32("general.alignment", 24);
  EXPECT_THAT(Parse(align.Build()), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("power of two")));
  GgufBuilder flag;
  flag.Bool("f", true);
  std::string bad = flag.Build();
  bad.back() = 7;
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bool stored as 7")));
  GgufBuilder type;
  type.U32("t", 1);
  bad = type.Build();
  bad[bad.size() - 8] = 13;  // the value type
  EXPECT_THAT(Parse(bad), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown value type 13")));
}

TEST(GgufTest, AlignmentFromMetadata) {
  GgufBuilder b;
  b.U32("general.alignment", 64);
  auto h = Parse(b.Build());
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->alignment, 64u);
}

TEST(GgufTest, TypeNames) {
  EXPECT_EQ(GgmlTypeName(3), "Q4_1");
  EXPECT_EQ(GgmlTypeName(14), "Q6_K");
  EXPECT_EQ(GgmlTypeName(77), "type 77");
}

}  // namespace
}  // namespace shardlm
