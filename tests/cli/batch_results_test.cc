// BatchResults: lines written in input order whatever order they finish in,
// and the run's wall time ending with the last line's outcome (not with the
// engine's shutdown after it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/batch.h"

namespace shardlm {
namespace {

std::string Written(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(BatchResultsTest, WritesInInputOrderAndStopsTheClockAtTheLastLine) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  const std::vector<BatchLine> lines = {{1, "{}"}, {3, "{}"}};
  BatchResults results(out, &lines);
  results.Start();
  results.Error(1, absl::InvalidArgumentError("prompt: empty"));
  EXPECT_EQ(Written(out), "");  // waits for line 0
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double before_last = results.wall_s();
  EXPECT_GE(before_last, 0.02);
  results.Ok(0, {5, 6}, "hi", "length", 4);
  const double at_last = results.wall_s();
  EXPECT_GE(at_last, before_last);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(results.wall_s(), at_last);  // the time after the last line is not the run's
  results.Finish();
  EXPECT_EQ(Written(out),
            "{\"index\":0,\"token_ids\":[5,6],\"text\":\"hi\",\"finish_reason\":\"length\"}\n"
            "{\"index\":1,\"error\":\"line 3: prompt: empty\"}\n");
  EXPECT_EQ(results.done(), 2);
  EXPECT_EQ(results.failed(), 1);
  EXPECT_EQ(results.output_tokens(), 2);
  EXPECT_EQ(results.prompt_tokens(), 4);
  std::fclose(out);
}

}  // namespace
}  // namespace shardlm
