// The kernels' switches as main reads them from the environment: defaults
// when unset, each variable's value, and a refusal naming the variable for a
// value it cannot read.
#include "kernels/kernel_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace shardlm::kernels {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

const std::vector<std::string> kVariables = {"SHARDLM_CPU_ISA",      "SHARDLM_GEMV_MAX_ROWS",
                                             "SHARDLM_POOL_SPIN_US", "SHARDLM_STEP_POOL",
                                             "SHARDLM_PACK_WEIGHTS", "SHARDLM_FUSED_EPILOGUES"};

class KernelOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& v : kVariables) unsetenv(v.c_str());
  }
  void TearDown() override { SetUp(); }
};

TEST_F(KernelOptionsTest, UnsetVariablesGiveTheDefaults) {
  absl::StatusOr<KernelOptions> o = KernelOptionsFromEnvironment();
  ASSERT_THAT(o, IsOk());
  const KernelOptions defaults;
  EXPECT_EQ(o->isa_cap, defaults.isa_cap);
  EXPECT_EQ(o->gemv_max_rows, -1);
  EXPECT_EQ(o->pool_spin_us, 100);
  EXPECT_TRUE(o->step_pool);
  EXPECT_TRUE(o->pack_weights);
  EXPECT_TRUE(o->fused_epilogues);
}

TEST_F(KernelOptionsTest, EachVariableSetsItsSwitch) {
  setenv("SHARDLM_CPU_ISA", "avx2", 1);
  setenv("SHARDLM_GEMV_MAX_ROWS", "0", 1);
  setenv("SHARDLM_POOL_SPIN_US", "250", 1);
  setenv("SHARDLM_STEP_POOL", "0", 1);
  setenv("SHARDLM_PACK_WEIGHTS", "0", 1);
  setenv("SHARDLM_FUSED_EPILOGUES", "1", 1);  // only 0 turns a switch off
  absl::StatusOr<KernelOptions> o = KernelOptionsFromEnvironment();
  ASSERT_THAT(o, IsOk());
  EXPECT_EQ(o->isa_cap, Isa::kAvx2);
  EXPECT_EQ(o->gemv_max_rows, 0);
  EXPECT_EQ(o->pool_spin_us, 250);
  EXPECT_FALSE(o->step_pool);
  EXPECT_FALSE(o->pack_weights);
  EXPECT_TRUE(o->fused_epilogues);
  setenv("SHARDLM_CPU_ISA", "scalar", 1);
  EXPECT_EQ(KernelOptionsFromEnvironment()->isa_cap, Isa::kScalar);
}

TEST_F(KernelOptionsTest, UnreadableValuesAreRefusedNamingTheVariable) {
  setenv("SHARDLM_CPU_ISA", "avx3", 1);
  EXPECT_THAT(KernelOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SHARDLM_CPU_ISA must be scalar, avx2 or avx512, got 'avx3'")));
  unsetenv("SHARDLM_CPU_ISA");
  setenv("SHARDLM_GEMV_MAX_ROWS", "many", 1);
  EXPECT_THAT(KernelOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SHARDLM_GEMV_MAX_ROWS must be an integer >= -1")));
  unsetenv("SHARDLM_GEMV_MAX_ROWS");
  setenv("SHARDLM_POOL_SPIN_US", "-5", 1);
  EXPECT_THAT(KernelOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SHARDLM_POOL_SPIN_US must be an integer >= 0, got '-5'")));
}

TEST_F(KernelOptionsTest, SettingThemCapsTheActiveIsaNeverAboveTheCpu) {
  const KernelOptions before = CurrentKernelOptions();
  const Isa active = ActiveIsa();
  KernelOptions o;
  o.isa_cap = Isa::kScalar;
  o.step_pool = false;
  SetKernelOptions(o);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
  EXPECT_FALSE(CurrentKernelOptions().step_pool);
  o.isa_cap = Isa::kAvx512;
  SetKernelOptions(o);
  EXPECT_EQ(ActiveIsa(), DetectedIsa());  // the cap never raises it above what the CPU has
  SetKernelOptions(before);
  CapIsa(active);
}

}  // namespace
}  // namespace shardlm::kernels
