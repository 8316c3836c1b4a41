#include "formats/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/status.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

OwnedTensor Tensor(const std::string& name, int n) {
  return OwnedTensor{name, DType::kF32, {n}, std::string(4 * n, '\0')};
}

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/ckpt_" + name + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(CheckpointTest, OpensShardedCheckpointThroughIndex) {
  const std::string dir = FreshDir("sharded");
  ASSERT_THAT(WriteSafetensors(dir + "/a.safetensors", {Tensor("x", 2)}), IsOk());
  ASSERT_THAT(WriteSafetensors(dir + "/b.safetensors", {Tensor("y", 3)}), IsOk());
  ASSERT_THAT(WriteStringToFile(dir + "/model.safetensors.index.json",
                                R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})"),
              IsOk());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_THAT(ckpt, IsOk());
  EXPECT_TRUE((*ckpt)->Has("x"));
  EXPECT_TRUE((*ckpt)->Has("y"));
  EXPECT_EQ((*ckpt)->TotalBytes(), 20u);
  EXPECT_THAT((*ckpt)->Get("z"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'z'")));
}

TEST(CheckpointTest, IndexNamingAbsentTensorIsAnError) {
  const std::string dir = FreshDir("absent");
  ASSERT_THAT(WriteSafetensors(dir + "/a.safetensors", {Tensor("x", 2)}), IsOk());
  ASSERT_THAT(
      WriteStringToFile(dir + "/model.safetensors.index.json", R"({"weight_map":{"q":"a.safetensors"}})"),
      IsOk());
  EXPECT_THAT(Checkpoint::Open(dir), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'q'")));
}

TEST(CheckpointTest, IndexCannotEscapeTheDirectory) {
  const std::string dir = FreshDir("escape");
  ASSERT_THAT(
      WriteStringToFile(dir + "/model.safetensors.index.json", R"({"weight_map":{"q":"../x.safetensors"}})"),
      IsOk());
  EXPECT_THAT(Checkpoint::Open(dir), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("plain name")));
}

TEST(CheckpointTest, EmptyDirectoryIsNotFound) {
  EXPECT_THAT(Checkpoint::Open(FreshDir("empty")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("model.safetensors")));
}

}  // namespace
}  // namespace shardlm
