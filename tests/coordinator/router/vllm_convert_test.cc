// vLLM's engine protocol in the serving core's terms and back (coordinator/router/vllm_convert.h),
// and the registry Abort reads (running_calls.h).
#include "coordinator/router/vllm_convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/router/running_calls.h"

namespace shardlm {
namespace {

namespace vpb = ::vllm::grpc::engine;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const VllmLimits kLimits{100, 1000, "tokenized.input_ids"};

vpb::GenerateRequest Request(bool stream = true) {
  vpb::GenerateRequest req;
  req.set_request_id("chatcmpl-1");
  req.set_stream(stream);
  return req;
}

TEST(VllmJobTest, DefaultsAreThoseOfVllm) {
  auto job = VllmJob(Request(), {5, 6, 7}, kLimits);
  ASSERT_TRUE(job.ok()) << job.status();
  const EngineRequest& r = job->request;
  EXPECT_THAT(r.prompt, ElementsAre(5, 6, 7));
  EXPECT_EQ(r.max_new_tokens, 97);  // max_tokens unset: the rest of the context
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);  // 0 is off, as the gateway's default 1 is
  EXPECT_EQ(r.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(r.has_seed);
  EXPECT_EQ(job->n, 1);
  EXPECT_TRUE(job->constraint.empty());
}

TEST(VllmJobTest, EverySupportedFieldArrives) {
  vpb::GenerateRequest req = Request(false);
  vpb::SamplingParams* sp = req.mutable_sampling_params();
  sp->set_temperature(0.5f);
  sp->set_top_p(0.9f);
  sp->set_top_k(40);
  sp->set_min_p(0.05f);
  sp->set_frequency_penalty(0.1f);
  sp->set_presence_penalty(0.2f);
  sp->set_repetition_penalty(1.1f);
  sp->set_max_tokens(10);
  sp->add_stop("END");
  sp->add_stop_token_ids(9);
  sp->set_ignore_eos(true);
  sp->set_n(3);
  sp->set_seed(-2);
  (*sp->mutable_logit_bias())[7] = -5.0f;
  (*sp->mutable_logit_bias())[3] = 2.0f;
  sp->set_regex("[a-z]+");
  auto job = VllmJob(req, {1, 2}, kLimits);
  ASSERT_TRUE(job.ok()) << job.status();
  const EngineRequest& r = job->request;
  EXPECT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.frequency_penalty, 0.1f);
  EXPECT_EQ(r.sampling.presence_penalty, 0.2f);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.max_new_tokens, 10);
  EXPECT_THAT(job->stop, ElementsAre("END"));
  EXPECT_THAT(r.stop_token_ids, ElementsAre(9));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(job->n, 3);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-2}));
  EXPECT_EQ(r.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 2.0f}, {7, -5.0f}}));
  EXPECT_EQ(job->constraint.kind, ConstraintSpec::Kind::kRegex);
  EXPECT_EQ(job->constraint.text, "[a-z]+");
}

TEST(VllmJobTest, ConstraintKinds) {
  vpb::GenerateRequest req = Request();
  req.mutable_sampling_params()->set_json_schema("{\"type\":\"object\"}");
  EXPECT_EQ(VllmJob(req, {1}, kLimits)->constraint.kind, ConstraintSpec::Kind::kJsonSchema);
  req.mutable_sampling_params()->set_json_object(true);
  EXPECT_EQ(VllmJob(req, {1}, kLimits)->constraint.kind, ConstraintSpec::Kind::kJsonObject);
  req.mutable_sampling_params()->set_json_object(false);
  EXPECT_TRUE(VllmJob(req, {1}, kLimits)->constraint.empty());
  req.mutable_sampling_params()->set_grammar("start: \"a\"");
  EXPECT_EQ(VllmJob(req, {1}, kLimits)->constraint.kind, ConstraintSpec::Kind::kGrammar);
  req.mutable_sampling_params()->mutable_choice()->add_choices("yes");
  req.mutable_sampling_params()->mutable_choice()->add_choices("no");
  auto job = VllmJob(req, {1}, kLimits);
  EXPECT_EQ(job->constraint.kind, ConstraintSpec::Kind::kChoice);
  EXPECT_THAT(job->constraint.choices, ElementsAre("yes", "no"));
}

TEST(VllmJobTest, TruncateKeepsTheLastTokens) {
  vpb::GenerateRequest req = Request();
  req.mutable_sampling_params()->set_truncate_prompt_tokens(2);
  EXPECT_THAT(VllmJob(req, {1, 2, 3, 4}, kLimits)->request.prompt, ElementsAre(3, 4));
  req.mutable_sampling_params()->set_truncate_prompt_tokens(-1);  // the context
  std::vector<int32_t> long_prompt(150, 4);
  long_prompt[50] = 8;
  auto job = VllmJob(req, long_prompt, kLimits);
  ASSERT_FALSE(job.ok());  // 100 tokens left fill the context: nothing could be generated
  EXPECT_EQ(ErrorField(job.status()), "tokenized.input_ids");
  req.mutable_sampling_params()->set_truncate_prompt_tokens(0);
  EXPECT_EQ(ErrorField(VllmJob(req, {1}, kLimits).status()), "sampling_params.truncate_prompt_tokens");
}

// Each field the engine lacks is refused naming it.
TEST(VllmJobTest, MissingFeaturesAreNamedNotDropped) {
  struct Case {
    const char* field;
    void (*set)(vpb::GenerateRequest*);
  };
  const Case cases[] = {
      {"sampling_params.min_tokens",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_min_tokens(1); }},
      {"sampling_params.logprobs",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_logprobs(0); }},
      {"sampling_params.prompt_logprobs",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_prompt_logprobs(1); }},
      {"sampling_params.structural_tag",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_structural_tag("{}"); }},
      {"sampling_params.n", [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_n(2); }},
      {"sampling_params.max_tokens",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_max_tokens(0); }},
      {"sampling_params.max_tokens",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->set_max_tokens(99); }},
      {"sampling_params.stop_token_ids",
       [](vpb::GenerateRequest* r) { r->mutable_sampling_params()->add_stop_token_ids(1000); }},
  };
  for (const Case& c : cases) {
    vpb::GenerateRequest req = Request(/*stream=*/true);
    c.set(&req);
    auto job = VllmJob(req, {1, 2}, kLimits);
    ASSERT_FALSE(job.ok()) << c.field;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(ErrorField(job.status()), c.field);
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.field));
  }
  vpb::GenerateRequest unstreamed = Request(/*stream=*/false);
  unstreamed.mutable_sampling_params()->set_n(2);
  EXPECT_TRUE(VllmJob(unstreamed, {1}, kLimits).ok());  // n > 1 is served unstreamed
}

TEST(VllmInputIdsTest, TheVocabularyBoundsTheIds) {
  vpb::TokenizedInput in;
  EXPECT_EQ(ErrorField(VllmInputIds(in, 10).status()), "tokenized.input_ids");
  in.add_input_ids(3);
  in.add_input_ids(10);
  auto ids = VllmInputIds(in, 10);
  EXPECT_EQ(ErrorField(ids.status()), "tokenized.input_ids");
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("[1] is 10"));
  in.set_input_ids(1, 9);
  EXPECT_THAT(*VllmInputIds(in, 10), ElementsAre(3, 9));
}

TEST(VllmStatusTest, EngineFieldsInThisProtocolsNames) {
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("top_k", "top_k must be >= 0"))), "sampling_params.top_k");
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("prompt", "prompt ..."))), "tokenized.input_ids");
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("constraint.json_schema", "bad"))),
            "sampling_params.json_schema");
  absl::Status length = VllmStatus(
      WithField(absl::InvalidArgumentError("prompt tokens + max_new_tokens must be <= 9"), "max_new_tokens"));
  EXPECT_EQ(ErrorField(length), "sampling_params.max_tokens");
  EXPECT_EQ(length.message(), "prompt tokens + max_tokens must be <= 9");
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("tokenized.input_ids", "is empty"))), "tokenized.input_ids");
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("prompt", "is long"), "text")), "text");
  EXPECT_EQ(VllmStatus(InvalidField("constraint.regex", "is bad")).message(), "sampling_params.regex is bad");
  EXPECT_EQ(ErrorField(VllmStatus(InvalidField("request_id", "is running"))), "request_id");
  EXPECT_EQ(VllmStatus(absl::UnavailableError("down")), absl::UnavailableError("down"));
}

GenerateUpdate Tokens(int sample, std::vector<int32_t> ids, std::vector<int32_t> prompt = {}) {
  GenerateUpdate u;
  u.sample = sample;
  u.token_ids = std::move(ids);
  u.prompt_token_ids = std::move(prompt);
  return u;
}

GenerateUpdate Last(std::vector<std::string> reasons) {
  GenerateUpdate u;
  for (size_t s = 0; s < reasons.size(); ++s) {
    SampleEnd& end = u.ends.emplace_back();
    end.sample = static_cast<int>(s);
    end.finish_reason = reasons[s];
  }
  u.usage = GenerateUsage{4, 2, 0};
  return u;
}

TEST(VllmReplyWriterTest, ChunksAreDeltasAndACompleteEnds) {
  VllmReplyWriter w(Request(/*stream=*/true), /*eos_ids=*/{2}, 1);
  std::deque<vpb::GenerateResponse> out;
  w.Write(Tokens(0, {11, 12}, {1, 2, 3, 4}), &out);
  w.Write(Tokens(0, {13, 2}), &out);  // the EOS id ends it and is left out
  w.Write(Last({"stop"}), &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_THAT(out[0].chunk().token_ids(), ElementsAre(11, 12));
  EXPECT_EQ(out[0].chunk().prompt_tokens(), 4u);
  EXPECT_EQ(out[0].chunk().completion_tokens(), 2u);
  EXPECT_THAT(out[1].chunk().token_ids(), ElementsAre(13));
  EXPECT_EQ(out[1].chunk().completion_tokens(), 4u);
  const vpb::GenerateComplete& c = out[2].complete();
  EXPECT_THAT(c.output_ids(), ElementsAre(11, 12, 13));
  EXPECT_EQ(c.finish_reason(), "stop");
  EXPECT_EQ(c.prompt_tokens(), 4u);
  EXPECT_EQ(c.completion_tokens(), 4u);
  EXPECT_EQ(c.cached_tokens(), 2u);
}

TEST(VllmReplyWriterTest, StopTokensShownWhenAskedOrIgnored) {
  vpb::GenerateRequest req = Request(/*stream=*/false);
  req.mutable_sampling_params()->add_stop_token_ids(7);
  req.mutable_sampling_params()->set_ignore_eos(true);
  {
    VllmReplyWriter w(req, {2}, 1);
    std::deque<vpb::GenerateResponse> out;
    w.Write(Tokens(0, {2, 5, 7}), &out);  // EOS ignored: shown; 7 a stop id: left out
    w.Write(Last({"stop"}), &out);
    ASSERT_EQ(out.size(), 1u);  // unstreamed: no chunks
    EXPECT_THAT(out[0].complete().output_ids(), ElementsAre(2, 5));
  }
  req.mutable_sampling_params()->set_include_stop_str_in_output(true);
  VllmReplyWriter w(req, {2}, 1);
  std::deque<vpb::GenerateResponse> out;
  w.Write(Tokens(0, {2, 5, 7}), &out);
  w.Write(Last({"stop"}), &out);
  EXPECT_THAT(out[0].complete().output_ids(), ElementsAre(2, 5, 7));
}

TEST(VllmReplyWriterTest, OneCompletePerSample) {
  VllmReplyWriter w(Request(/*stream=*/false), {}, 2);
  std::deque<vpb::GenerateResponse> out;
  w.Write(Tokens(0, {1}), &out);
  w.Write(Tokens(1, {2, 3}), &out);
  w.Write(Last({"length", "stop"}), &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].complete().output_ids(), ElementsAre(1));
  EXPECT_EQ(out[0].complete().finish_reason(), "length");
  EXPECT_THAT(out[1].complete().output_ids(), ElementsAre(2, 3));
  EXPECT_EQ(out[1].complete().completion_tokens(), 2u);
}

TEST(RunningCallsTest, AbortEndsOnlyRunningIds) {
  RunningCalls calls;
  int stopped_a = 0, stopped_b = 0;
  ASSERT_TRUE(calls.Add("", "a", [&] { ++stopped_a; }).ok());
  ASSERT_TRUE(calls.Add("", "b", [&] { ++stopped_b; }).ok());
  absl::Status dup = calls.Add("", "a", [] {});
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrorField(dup), "request_id");
  EXPECT_EQ(calls.Abort("", {"a", "missing"}), 1);
  EXPECT_EQ(stopped_a, 1);
  EXPECT_EQ(stopped_b, 0);
  calls.Remove("", "b");
  EXPECT_EQ(calls.Abort("", {"b"}), 0);
  EXPECT_EQ(calls.size(), 1);  // "a" stays until its call has finished
  calls.Remove("", "a");
  EXPECT_TRUE(calls.Add("", "a", [] {}).ok());
}

// With API keys on, a key neither sees nor blocks another key's ids.
TEST(RunningCallsTest, IdsBelongToTheirKey) {
  RunningCalls calls;
  int stopped = 0;
  ASSERT_TRUE(calls.Add("key-a", "chatcmpl-1", [&] { ++stopped; }).ok());
  EXPECT_TRUE(calls.Add("key-b", "chatcmpl-1", [] {}).ok());
  EXPECT_EQ(calls.Abort("key-b", {"chatcmpl-1"}), 1);  // key-b's own call
  EXPECT_EQ(stopped, 0);
  EXPECT_EQ(calls.Abort("key-a", {"chatcmpl-1"}), 1);
  EXPECT_EQ(stopped, 1);
}

}  // namespace
}  // namespace shardlm
