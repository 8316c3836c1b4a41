// The front ends build the engine's request each straight from its own wire
// format (coordinator/grpc/proto_convert.h for gRPC, coordinator/openai/openai_api.h for
// OpenAI's JSON): the same request said both ways is the same GenerateJob.
#include <gtest/gtest.h>

#include "coordinator/grpc/proto_convert.h"
#include "coordinator/openai/openai_api.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

openai::ModelContext Model() {
  openai::ModelContext m;
  m.names = {"m"};
  m.max_context = 128;
  m.vocab_size = 100;
  return m;
}

GenerateJob FromOpenAi(const std::string& body) {
  openai::OpenAiRequest r;
  openai::ApiError error;
  EXPECT_TRUE(
      openai::ParseRequest(openai::Endpoint::kCompletions, openai::ParseJson(body), Model(), &r, &error))
      << error.message;
  EXPECT_EQ(r.prompts.size(), 1u);
  return r.prompts.empty() ? GenerateJob() : r.prompts[0];
}

void ExpectSameJob(const GenerateJob& a, const GenerateJob& b) {
  EXPECT_EQ(a.request.prompt, b.request.prompt);
  EXPECT_EQ(a.request.max_new_tokens, b.request.max_new_tokens);
  EXPECT_EQ(a.request.sampling.temperature, b.request.sampling.temperature);
  EXPECT_EQ(a.request.sampling.top_p, b.request.sampling.top_p);
  EXPECT_EQ(a.request.sampling.top_k, b.request.sampling.top_k);
  EXPECT_EQ(a.request.sampling.min_p, b.request.sampling.min_p);
  EXPECT_EQ(a.request.sampling.repetition_penalty, b.request.sampling.repetition_penalty);
  EXPECT_EQ(a.request.sampling.presence_penalty, b.request.sampling.presence_penalty);
  EXPECT_EQ(a.request.sampling.frequency_penalty, b.request.sampling.frequency_penalty);
  EXPECT_EQ(a.request.sampling.logit_bias, b.request.sampling.logit_bias);
  EXPECT_EQ(a.request.sampling.num_top_logprobs, b.request.sampling.num_top_logprobs);
  EXPECT_EQ(a.request.has_seed, b.request.has_seed);
  EXPECT_EQ(a.request.sampling.seed, b.request.sampling.seed);
  EXPECT_EQ(a.request.stop_token_ids, b.request.stop_token_ids);
  EXPECT_EQ(a.request.ignore_eos, b.request.ignore_eos);
  EXPECT_EQ(a.constraint.kind, b.constraint.kind);
  EXPECT_EQ(a.constraint.text, b.constraint.text);
  EXPECT_EQ(a.constraint.choices, b.constraint.choices);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.stop, b.stop);
}

TEST(FrontEndRequestTest, DefaultsAreTheSameBothWays) {
  pb::GenerateRequest g;
  g.set_max_new_tokens(16);
  const GenerateJob grpc = GenerateJobFromProto(g, {1, 2, 3});
  ExpectSameJob(grpc, FromOpenAi(R"({"model": "m", "prompt": [1, 2, 3]})"));
  // Unset is off: temperature, top_p and repetition_penalty 1; n 1; no seed.
  EXPECT_EQ(grpc.request.sampling.temperature, 1.0f);
  EXPECT_EQ(grpc.request.sampling.top_p, 1.0f);
  EXPECT_EQ(grpc.request.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(grpc.n, 1);
  EXPECT_FALSE(grpc.request.has_seed);
  EXPECT_TRUE(grpc.constraint.empty());
}

TEST(FrontEndRequestTest, EveryParameterLandsInTheSameField) {
  pb::GenerateRequest g;
  g.set_max_new_tokens(9);
  g.set_n(2);
  g.add_stop("\n\n");
  g.add_stop("END");
  g.add_stop_token_ids(7);
  g.set_ignore_eos(true);
  g.set_top_logprobs(3);
  pb::SamplingParams* s = g.mutable_sampling();
  s->set_temperature(0.5f);
  s->set_top_p(0.75f);
  s->set_top_k(40);
  s->set_min_p(0.125f);
  s->set_repetition_penalty(1.25f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.5f);
  s->set_seed(42);
  (*s->mutable_logit_bias())[5] = -100.0f;
  g.mutable_constraint()->set_regex("[a-z]+");
  const GenerateJob grpc = GenerateJobFromProto(g, {4, 5});
  ExpectSameJob(grpc, FromOpenAi(R"({"model": "m", "prompt": [4, 5], "max_tokens": 9, "n": 2,
      "best_of": 2, "stop": ["\n\n", "END"], "stop_token_ids": [7], "ignore_eos": true, "logprobs": 3,
      "temperature": 0.5, "top_p": 0.75, "top_k": 40, "min_p": 0.125, "repetition_penalty": 1.25,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 42, "logit_bias": {"5": -100},
      "guided_regex": "[a-z]+"})"));
  EXPECT_EQ(grpc.request.sampling.temperature, 0.5f);
  EXPECT_EQ(grpc.request.sampling.seed, 42u);
  EXPECT_TRUE(grpc.request.has_seed);
  EXPECT_EQ(grpc.n, 2);
  EXPECT_EQ(grpc.constraint.kind, ConstraintSpec::Kind::kRegex);
}

// Keys spelling one token id twice ("5", "05") are one bias, the last given,
// as the gRPC API's map keeps one value per id.
TEST(FrontEndRequestTest, ALogitBiasKeySpeltTwiceIsOneBias) {
  const GenerateJob job =
      FromOpenAi(R"({"model": "m", "prompt": [1], "logit_bias": {"5": 10, "7": 1, "05": -3}})");
  EXPECT_EQ(job.request.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -3.0f}, {7, 1.0f}}));
}

TEST(FrontEndRequestTest, ConstraintsOfEachKind) {
  pb::Constraint c;
  EXPECT_TRUE(ConstraintFromProto(c).empty());
  c.set_json_object(false);
  EXPECT_TRUE(ConstraintFromProto(c).empty());
  c.set_json_object(true);
  EXPECT_EQ(ConstraintFromProto(c).kind, ConstraintSpec::Kind::kJsonObject);
  c.mutable_choice()->add_options("yes");
  c.mutable_choice()->add_options("no");
  const ConstraintSpec choice = ConstraintFromProto(c);
  EXPECT_EQ(choice.kind, ConstraintSpec::Kind::kChoice);
  EXPECT_EQ(choice.choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(FromOpenAi(R"({"model": "m", "prompt": [1], "guided_choice": ["yes", "no"]})").constraint.choices,
            choice.choices);
  c.set_json_schema(R"({"type":"integer"})");
  ExpectSameJob(GenerateJobFromProto(
                    [&] {
                      pb::GenerateRequest g;
                      g.set_max_new_tokens(16);
                      *g.mutable_constraint() = c;
                      return g;
                    }(),
                    {1}),
                FromOpenAi(R"({"model": "m", "prompt": [1], "guided_json": {"type": "integer"}})"));
}

}  // namespace
}  // namespace shardlm
