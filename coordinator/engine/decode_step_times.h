// How long a step of decodes takes by its rows (the decoding sequences'
// tokens plus speculation's proposals), learnt from the steps run. The draft
// model's proposal lengths weigh a verifying step's extra rows with it
// (engine_speculate.cc): on a CPU a row is not free even while a step reads
// every weight (Qwen2.5-Coder-1.5B Q4_K_M on 2 cores: 25 ms for one row,
// 32 for two, 35 for three, 41 for four), so one more proposal has to be
// likely enough to pay for its row as well as its draft pass.
//
//   DecodeStepTimes t;
//   t.Observe(1, 25.0);
//   t.Observe(3, 35.0);
//   t.Estimate(2);  // 30: between the two measured
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace shardlm {

class DecodeStepTimes {
 public:
  // Each row count's time is a moving average, the newest step weighing this.
  static constexpr double kWeight = 0.2;
  // While a single row count has been measured, each row more or less is
  // guessed to cost this share of it (optimistic, so that longer steps get
  // tried and measured).
  static constexpr double kGuessedRowShare = 0.1;

  void Observe(int32_t rows, double ms);
  // A step of `rows` rows: its own average when measured, else on the line
  // through the nearest measured counts on either side (or the two nearest
  // on one side; kGuessedRowShare while there is one); nullopt before any step.
  std::optional<double> Estimate(int32_t rows) const;

 private:
  std::map<int32_t, double> ms_;  // by rows
};

}  // namespace shardlm
