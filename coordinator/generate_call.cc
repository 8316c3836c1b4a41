// InferenceService::Generate: n samples of one prompt, streamed.
//
// With n > 1 the prompt is prefilled once into a hidden handle, and each
// sample continues from it (its full blocks shared, the partly filled one
// copied), so the prompt's KV is computed and stored once.
//
// Stop strings are matched on each sample's detokenized text. Text that could
// still turn into a stop string is held back, so a client never sees part of
// one; the sample is cancelled (its blocks freed) as soon as one appears.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "coordinator/inference_service.h"
#include "tokenizer/incremental_detokenizer.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

struct Event {
  int sample;
  int32_t token = -1;
  float logprob = 0;
  std::vector<TopLogprob> top;
  std::optional<GenerateResult> done;
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  void Push(Event e) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(std::move(e));
    cv.notify_all();
  }
};

// One sample's text: detokenized, with stop strings cut.
class SampleText {
 public:
  SampleText(const Tokenizer* tok, const std::vector<std::string>& stops) : stops_(stops) {
    if (tok != nullptr) detok_ = std::make_unique<IncrementalDetokenizer>(*tok, /*skip_special=*/true);
  }
  // Adds a token; returns the text that may be sent now. Sets stopped().
  std::string Add(int32_t token) {
    if (!detok_ || stopped_) return "";
    return Push(detok_->Append(token));
  }
  std::string Finish() {
    if (!detok_ || stopped_) return "";
    std::string out = Push(detok_->Finish());
    out += held_;
    held_.clear();
    return out;
  }
  bool stopped() const { return stopped_; }

 private:
  std::string Push(const std::string& piece) {
    held_ += piece;
    for (const std::string& s : stops_) {
      const size_t at = held_.find(s);
      if (at != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, at);
        held_.clear();
        return out;
      }
    }
    // Hold back the longest tail that is the start of a stop string.
    size_t keep = 0;
    for (const std::string& s : stops_) {
      for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
        if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
          keep = len;
          break;
        }
      }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }

  std::vector<std::string> stops_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::string held_;
  bool stopped_ = false;
};

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

grpc::Status InferenceService::GenerateImpl(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                                            grpc::ServerWriter<pb::GenerateResponse>* writer,
                                            CallRecord& call) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  grpc::Status st = StreamGenerate(
      *req, owner, call, [writer](const pb::GenerateResponse& msg) { return writer->Write(msg); },
      [ctx] { return ctx->IsCancelled(); });
  if (st.error_code() == grpc::StatusCode::CANCELLED) {
    absl::Status why = CallGone(*ctx);  // say DEADLINE_EXCEEDED when that was the reason
    if (!why.ok()) return ToGrpcStatus(why);
  }
  return st;
}

grpc::Status InferenceService::StreamGenerate(const pb::GenerateRequest& request, const std::string& owner,
                                              CallRecord& call,
                                              const std::function<bool(const pb::GenerateResponse&)>& emit,
                                              const std::function<bool()>& gone) {
  const pb::GenerateRequest* req = &request;
  const int n = req->n() == 0 ? 1 : req->n();
  if (n < 1 || n > kMaxSamples) {
    return ToGrpcStatus(Invalid(absl::StrCat("n must be in [1, ", kMaxSamples, "], got ", req->n())));
  }
  if (req->stop_size() > kMaxStopStrings) {
    return ToGrpcStatus(
        Invalid(absl::StrCat("stop holds at most ", kMaxStopStrings, " strings, got ", req->stop_size())));
  }
  for (int i = 0; i < req->stop_size(); ++i) {
    if (req->stop(i).empty() || req->stop(i).size() > kMaxStopStringBytes) {
      return ToGrpcStatus(
          Invalid(absl::StrCat("stop[", i, "] must be 1 to ", kMaxStopStringBytes, " bytes")));
    }
  }
  if (req->stop_size() > 0 && tokenizer_ == nullptr) {
    return ToGrpcStatus(Invalid("stop strings need a tokenizer.json in the model"));
  }
  auto prompt = PromptIds(req->prompt(), req->prefix_handle().empty(), "prompt");
  if (!prompt.ok()) return ToGrpcStatus(prompt.status());

  GenerateRequest base;
  base.owner = owner;
  base.request_id = call.id();
  base.arrival = call.start();
  base.prefix_handle = req->prefix_handle();
  base.prompt = *prompt;
  const pb::SamplingParams& sp = req->sampling();
  base.sampling.temperature = sp.has_temperature() ? sp.temperature() : 1.0f;
  base.sampling.top_k = sp.top_k();
  base.sampling.top_p = sp.has_top_p() ? sp.top_p() : 1.0f;
  base.sampling.min_p = sp.min_p();
  base.sampling.repetition_penalty = sp.has_repetition_penalty() ? sp.repetition_penalty() : 1.0f;
  base.sampling.presence_penalty = sp.presence_penalty();
  base.sampling.frequency_penalty = sp.frequency_penalty();
  for (const auto& [id, bias] : sp.logit_bias()) base.sampling.logit_bias.emplace_back(id, bias);
  base.sampling.num_top_logprobs = req->top_logprobs();
  base.has_seed = sp.has_seed();
  base.sampling.seed = sp.seed();
  base.max_new_tokens = req->max_new_tokens();
  base.stop_token_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
  base.ignore_eos = req->ignore_eos();
  base.keep_handle = req->return_chunk_result();

  // n > 1: prefill the prompt once into a hidden handle the samples share.
  int32_t prompt_tokens = 0, cached_tokens = 0;
  std::string shared_handle;
  if (n > 1) {
    GenerateRequest pre;
    pre.owner = owner;
    pre.request_id = call.id();
    pre.arrival = call.start();
    pre.prefix_handle = base.prefix_handle;
    pre.prompt = base.prompt;
    pre.max_new_tokens = 0;
    pre.keep_handle = true;
    pre.transient_handle = true;  // released as soon as the samples hold its blocks
    // Validate the samples' own limits before doing any work.
    absl::Status st = loop_->Validate(base);
    if (!st.ok()) return ToGrpcStatus(st);
    std::vector<GenerateRequest> one;
    one.push_back(std::move(pre));
    auto pre_result = RunAll(std::move(one), owner, [&gone] {
      return gone() ? absl::CancelledError("the client went away") : absl::OkStatus();
    });
    if (!pre_result.ok()) return ToGrpcStatus(pre_result.status());
    shared_handle = (*pre_result)[0].handle;
    prompt_tokens = (*pre_result)[0].prefix_tokens + static_cast<int32_t>(base.prompt.size());
    cached_tokens = (*pre_result)[0].cached_tokens;
  }

  auto channel = std::make_shared<Channel>();
  std::vector<int64_t> ids;
  absl::Status submit_error;
  for (int s = 0; s < n; ++s) {
    GenerateRequest r = base;
    if (n > 1) {
      r.prefix_handle = shared_handle;
      r.prompt.clear();
      if (base.has_seed) r.sampling.seed = base.sampling.seed + s;  // distinct, reproducible
    }
    r.on_token = [channel, s](int32_t token, float logprob, const std::vector<TopLogprob>& top) {
      channel->Push(Event{s, token, logprob, top, std::nullopt});
    };
    auto id = loop_->Submit(std::move(r), [channel, s](GenerateResult result) {
      channel->Push(Event{s, -1, 0, {}, std::move(result)});
    });
    if (!id.ok()) {
      submit_error = id.status();
      break;
    }
    ids.push_back(*id);
  }
  if (!shared_handle.empty())
    loop_->ReleaseHandle(shared_handle, owner).IgnoreError();  // samples hold their blocks
  std::vector<std::optional<GenerateResult>> results(n);
  // Leaving early: cancel what runs, and release every handle a finished
  // sample kept (its result may still wait in the channel), so nothing stays
  // pinned until its expiry.
  auto abandon = [&] {
    for (int64_t id : ids) loop_->Cancel(id);
    std::deque<Event> rest;
    {
      std::lock_guard<std::mutex> lock(channel->mu);
      rest.swap(channel->events);
    }
    for (Event& e : rest) {
      if (e.done && !e.done->handle.empty()) loop_->ReleaseHandle(e.done->handle, owner).IgnoreError();
    }
    for (auto& r : results) {
      if (r && !r->handle.empty()) loop_->ReleaseHandle(r->handle, owner).IgnoreError();
    }
  };
  if (!submit_error.ok()) {
    abandon();
    return ToGrpcStatus(submit_error);
  }

  std::vector<SampleText> texts;
  for (int s = 0; s < n; ++s) {
    texts.emplace_back(tokenizer_, std::vector<std::string>(req->stop().begin(), req->stop().end()));
  }
  std::vector<std::string> finish(n);
  std::vector<bool> stopping(n, false);  // a stop string appeared; waiting for the result
  std::vector<int32_t> sent_tokens(n, 0);
  int finished = 0;
  bool first = true;
  while (finished < n) {
    std::deque<Event> batch;
    {
      std::unique_lock<std::mutex> lock(channel->mu);
      channel->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !channel->events.empty(); });
      batch.swap(channel->events);
    }
    if (gone()) {
      for (Event& e : batch) {
        if (e.done && !e.done->handle.empty()) loop_->ReleaseHandle(e.done->handle, owner).IgnoreError();
      }
      abandon();
      return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
    // One message per sample with news, in sample order.
    std::vector<std::optional<pb::GenerateResponse>> msgs(n);
    for (Event& e : batch) {
      if (!finish[e.sample].empty()) continue;
      if (stopping[e.sample] && !e.done) continue;  // tokens past the stop string
      auto& msg = msgs[e.sample];
      if (!msg) {
        msg.emplace();
        msg->set_sample(e.sample);
      }
      if (e.done) {
        if (!e.done->status.ok()) {
          abandon();
          return ToGrpcStatus(e.done->status);
        }
        msg->mutable_text()->append(texts[e.sample].Finish());
        finish[e.sample] = stopping[e.sample] ? "stop" : FinishReasonName(e.done->finish_reason);
        results[e.sample] = std::move(e.done);
        ++finished;
        continue;
      }
      msg->add_token_ids(e.token);
      msg->add_logprobs(e.logprob);
      ++sent_tokens[e.sample];
      if (req->top_logprobs() > 0) FillTop(e.top, msg->add_top_logprobs());
      msg->mutable_text()->append(texts[e.sample].Add(e.token));
      if (texts[e.sample].stopped()) {
        // End the sample now (keeping its handle when asked); its result follows.
        loop_->Stop(ids[e.sample]);
        stopping[e.sample] = true;
      }
    }
    for (auto& msg : msgs) {
      if (!msg) continue;
      if (first) {
        msg->mutable_prompt_token_ids()->Add(base.prompt.begin(), base.prompt.end());
        first = false;
      }
      if (!emit(*msg)) {
        abandon();
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
    }
  }
  pb::GenerateResponse last;
  int32_t generated = 0;
  for (int s = 0; s < n; ++s) {
    pb::SampleResult* sr = last.add_results();
    sr->set_sample(s);
    sr->set_finish_reason(finish[s]);
    generated += sent_tokens[s];
    if (results[s]) {
      if (n == 1) {
        prompt_tokens = results[s]->prefix_tokens + static_cast<int32_t>(results[s]->prompt.size());
        cached_tokens = results[s]->cached_tokens;
      }
      if (req->return_chunk_result())
        FillChunkResult(*results[s], /*generated=*/true, sr->mutable_chunk_result());
    }
  }
  last.mutable_usage()->set_prompt_tokens(prompt_tokens);
  last.mutable_usage()->set_cached_tokens(cached_tokens);
  last.mutable_usage()->set_generated_tokens(generated);
  call.SetTokens(prompt_tokens, cached_tokens, generated);
  if (first) last.mutable_prompt_token_ids()->Add(base.prompt.begin(), base.prompt.end());
  emit(last);
  return grpc::Status::OK;
}

grpc::Status InferenceService::Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                                        grpc::ServerWriter<pb::GenerateResponse>* out) {
  CallRecord call(ctx, "Generate", metrics_);
  return call.Finish(GenerateImpl(ctx, req, out, call));
}

}  // namespace shardlm
