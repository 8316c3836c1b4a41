#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

// A file image: 8-byte length, header JSON, then `data_bytes` of data.
std::string Image(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\x01');
  return out;
}

absl::StatusOr<SafetensorsHeader> Parse(const std::string& image) {
  return ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(image.data()), image.size(),
                                "t.safetensors");
}

TEST(SafetensorsHeaderTest, ParsesValidHeader) {
  auto h = Parse(
      Image(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
            R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})",
            32));
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->metadata.at("format"), "pt");
  ASSERT_EQ(h->tensors.size(), 2u);
  const TensorView& b = h->tensors.at("b");
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.shape, std::vector<int64_t>({4}));
  EXPECT_EQ(b.nbytes, 8u);
  EXPECT_EQ(b.offset, 24u);
}

TEST(SafetensorsHeaderTest, ScalarAndEmptyTensors) {
  auto h = Parse(Image(
      R"({"s":{"dtype":"F16","shape":[],"data_offsets":[0,2]},"e":{"dtype":"F32","shape":[0,5],"data_offsets":[2,2]}})",
      2));
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->tensors.at("s").numel(), 1);
  EXPECT_EQ(h->tensors.at("e").numel(), 0);
}

struct BadCase {
  const char* name;
  std::string image;
  const char* message;
};

TEST(SafetensorsHeaderTest, RejectsMalformedHeadersWithNamedErrors) {
  std::string huge_len(8, '\0');
  huge_len[7] = '\x7f';
  std::string over_file = Image("{}", 0);
  over_file[0] = '\x40';  // claims a 64-byte header in a 10-byte file
  const std::vector<BadCase> cases = {
      {"short file", "abc", "shorter than the 8-byte header length"},
      {"length over cap", huge_len + "{}", "exceeds the cap"},
      {"length over file", over_file, "exceeds the file size"},
      {"bad json", Image("{\"a\":", 0), "not well-formed JSON"},
      {"not object", Image("[1,2]", 0), "not a JSON object"},
      {"unknown dtype", Image(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1),
       "'F8' is not supported"},
      {"missing shape", Image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing array 'shape'"},
      {"negative dim", Image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
       "non-negative"},
      {"past end", Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       "past the data section"},
      {"begin after end", Image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
       "begin 4 > end 0"},
      {"size mismatch", Image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "!= product(shape)"},
      {"overlap",
       Image(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12),
       "overlap"},
      {"offsets arity", Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "[begin, end]"},
      {"metadata value", Image(R"({"__metadata__":{"x":1}})", 0), "not a string"},
      {"huge shape",
       Image(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4),
       "too large"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto h = Parse(c.image);
    EXPECT_THAT(h, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
    EXPECT_THAT(h, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.safetensors")));
  }
}

TEST(SafetensorsFileTest, WriteThenOpenIsZeroCopyAndExact) {
  const std::string path = ::testing::TempDir() + "/rt." + std::to_string(::getpid()) + ".safetensors";
  std::vector<float> values = {1.5f, -2.0f, 3.25f};
  OwnedTensor t{"w", DType::kF32, {3}, std::string(reinterpret_cast<char*>(values.data()), 12)};
  ASSERT_THAT(WriteSafetensors(path, {t}, {{"format", "pt"}}), IsOk());
  auto file = SafetensorsFile::Open(path);
  ASSERT_THAT(file, IsOk());
  const TensorView* w = (*file)->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::memcmp(w->data, values.data(), 12), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 8, 0u) << "data section should stay 8-byte aligned";
  EXPECT_EQ((*file)->Find("missing"), nullptr);
}

TEST(SafetensorsFileTest, MissingFileIsNotFoundNamingPath) {
  EXPECT_THAT(SafetensorsFile::Open("/nonexistent/x.safetensors"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/x.safetensors")));
}

}  // namespace
}  // namespace shardlm
