#include "coordinator/serving/generate_session.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/serving/request_limits.h"
#include "coordinator/serving/serving_core.h"
#include "tokenizer/stop_text.h"

namespace shardlm {

namespace {

// The message starts with the field it is about, as every request error's does.
absl::Status Invalid(const std::string& field, const std::string& message) {
  return WithField(absl::InvalidArgumentError(message), field);
}

}  // namespace

void GenerateSession::Channel::Push(Event e) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!abandoned) {
      events.push_back(std::move(e));
      wake = notify;
    }
  }
  if (wake) {
    wake();
  } else if (e.done && !e.done->handle.empty()) {
    loop->ReleaseHandle(e.done->handle, owner).IgnoreError();  // nobody will take it
  }
}

GenerateSession::GenerateSession(ServingCore* core, std::string owner, CallRecord* call)
    : core_(core), owner_(std::move(owner)), call_(call) {
  channel_->loop = core_->loop();
  channel_->owner = owner_;
}

GenerateSession::~GenerateSession() {
  if (!ended_) Abandon();
}

// n and the stop strings within their limits (ValidateRequest checks the rest).
absl::Status GenerateSession::CheckJob(const ServingCore& core, const GenerateJob& job) {
  if (job.n < 1 || job.n > kMaxSamples)
    return Invalid("n", absl::StrCat("n must be in [1, ", kMaxSamples, "], got ", job.n));
  if (job.n > core.loop()->max_queued_requests()) {
    return Invalid(
        "n", absl::StrCat("n is ", job.n, "; this server queues at most ", core.loop()->max_queued_requests(),
                          " sequences at once (--max-queued-requests), so the samples could "
                          "never run together"));
  }
  if (job.stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return Invalid("stop",
                   absl::StrCat("stop holds at most ", kMaxStopStrings, " strings, got ", job.stop.size()));
  }
  for (size_t i = 0; i < job.stop.size(); ++i) {
    if (job.stop[i].empty() || job.stop[i].size() > static_cast<size_t>(kMaxStopStringBytes)) {
      return Invalid("stop", absl::StrCat("stop[", i, "] must be 1 to ", kMaxStopStringBytes, " bytes"));
    }
  }
  if (job.min_indent > 0 && core.tokenizer() == nullptr)
    return Invalid("n_indent", "n_indent needs a tokenizer.json in the model");
  if (!job.stop.empty() && core.tokenizer() == nullptr) {
    return Invalid("stop", "stop strings need a tokenizer.json in the model");
  }
  return absl::OkStatus();
}

// The samples' common request: who asks, and the constraint compiled.
absl::Status GenerateSession::FillBase(GenerateJob& job) {
  base_ = std::move(job.request);
  base_.owner = owner_;
  base_.request_id = call_->id();
  base_.deadline = call_->engine_deadline();
  base_.arrival = call_->start();
  SHARDLM_ASSIGN_OR_RETURN(base_.constraint, core_->CompileConstraint(job.constraint));
  return absl::OkStatus();
}

// n > 1: the prompt prefilled once into a hidden handle the samples share
// (the samples' own limits validated before any work).
absl::Status GenerateSession::PrefillShared() {
  SHARDLM_RETURN_IF_ERROR(core_->loop()->Validate(base_));
  EngineRequest pre;
  pre.owner = owner_;
  pre.request_id = call_->id();
  pre.deadline = call_->engine_deadline();
  pre.arrival = call_->start();
  pre.prefix_handle = base_.prefix_handle;
  pre.prefix_length = base_.prefix_length;
  pre.prompt = base_.prompt;
  pre.max_new_tokens = 0;
  pre.keep_handle = true;
  pre.transient_handle = true;  // released as soon as the samples hold its blocks
  SHARDLM_ASSIGN_OR_RETURN(int64_t id,
                           core_->loop()->Submit(std::move(pre), [channel = channel_](EngineResult result) {
                             channel->Push(Event{-1, -1, 0, {}, std::move(result)});
                           }));
  ids_.push_back(id);
  return absl::OkStatus();
}

absl::Status GenerateSession::Start(GenerateJob job, std::function<void()> notify) {
  n_ = job.n;
  SHARDLM_RETURN_IF_ERROR(CheckJob(*core_, job));
  SHARDLM_RETURN_IF_ERROR(FillBase(job));
  for (int s = 0; s < n_; ++s)
    texts_.push_back(std::make_unique<StopText>(core_->tokenizer(), job.stop, job.min_indent));
  finish_.assign(n_, "");
  stopping_.assign(n_, false);
  sent_tokens_.assign(n_, 0);
  results_.resize(n_);
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    channel_->notify = std::move(notify);
  }
  return n_ == 1 ? SubmitSamples() : PrefillShared();
}

absl::Status GenerateSession::SubmitSamples() {
  samples_submitted_ = true;
  ids_.clear();
  for (int s = 0; s < n_; ++s) {
    EngineRequest r = base_;
    if (n_ > 1) {
      r.prefix_handle = shared_handle_;  // it holds the prefix and the prompt: attach all of it
      r.prefix_length = 0;
      r.prompt.clear();
      if (base_.has_seed) r.sampling.seed = base_.sampling.seed + s;  // distinct, reproducible
    }
    std::shared_ptr<Channel> channel = channel_;
    r.on_token = [channel, s](int32_t token, float logprob, const std::vector<TopLogprob>& top) {
      channel->Push(Event{s, token, logprob, top, std::nullopt});
    };
    auto id = core_->loop()->Submit(std::move(r), [channel, s](EngineResult result) {
      channel->Push(Event{s, -1, 0, {}, std::move(result)});
    });
    if (!id.ok()) return id.status();
    ids_.push_back(*id);
  }
  if (!shared_handle_.empty()) {
    // The samples hold its blocks now.
    core_->loop()->ReleaseHandle(shared_handle_, owner_).IgnoreError();
    shared_handle_.clear();
  }
  return absl::OkStatus();
}

void GenerateSession::Abandon() {
  if (ended_) return;
  ended_ = true;
  EngineLoop* loop = core_->loop();
  std::deque<Event> rest;
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    channel_->abandoned = true;  // results still to come release their own handles
    channel_->notify = nullptr;
    rest.swap(channel_->events);
  }
  for (int64_t id : ids_) loop->Cancel(id);
  // Release every handle a finished sample kept (its result may still wait
  // in the channel), so nothing stays pinned until its expiry.
  for (Event& e : rest) {
    if (e.done && !e.done->handle.empty()) loop->ReleaseHandle(e.done->handle, owner_).IgnoreError();
  }
  for (auto& r : results_) {
    if (r && !r->handle.empty()) loop->ReleaseHandle(r->handle, owner_).IgnoreError();
  }
  if (!shared_handle_.empty()) loop->ReleaseHandle(shared_handle_, owner_).IgnoreError();
}

bool GenerateSession::End(const absl::Status& status, absl::Status* out) {
  Abandon();
  *out = status;
  return true;
}

// The final update: each sample's finish reason (and its kept handle when
// asked), the usage; the handles kept now belong to the client.
GenerateUpdate GenerateSession::FinalUpdate() {
  GenerateUpdate last;
  int32_t generated = 0;
  for (int s = 0; s < n_; ++s) {
    SampleEnd& end = last.ends.emplace_back();
    end.sample = s;
    end.finish_reason = finish_[s];
    generated += sent_tokens_[s];
    if (!results_[s]) continue;
    end.constraint_unfinished = results_[s]->constraint_unfinished;
    if (n_ == 1) {
      prompt_tokens_ = results_[s]->prefix_tokens + static_cast<int32_t>(results_[s]->prompt.size());
      cached_tokens_ = results_[s]->cached_tokens;
    }
    if (base_.keep_handle) end.kept = *results_[s];
  }
  last.usage = GenerateUsage{prompt_tokens_, cached_tokens_, generated};
  call_->SetTokens(prompt_tokens_, cached_tokens_, generated);
  if (first_) last.prompt_token_ids = base_.prompt;
  return last;
}

// One event of sample e.sample into its message: a token (text, stop
// strings), or its end. False (with `status`) when the call ends here.
bool GenerateSession::ApplyEvent(Event& e, std::optional<GenerateUpdate>& msg, absl::Status* status) {
  if (!finish_[e.sample].empty()) return true;
  if (stopping_[e.sample] && !e.done) return true;  // tokens past the stop string
  if (!msg) {
    msg.emplace();
    msg->sample = e.sample;
  }
  if (e.done) {
    if (!e.done->status.ok()) {
      if (!e.done->handle.empty()) core_->loop()->ReleaseHandle(e.done->handle, owner_).IgnoreError();
      End(e.done->status, status);
      return false;
    }
    msg->text.append(texts_[e.sample]->Finish());
    finish_[e.sample] = stopping_[e.sample] ? "stop" : FinishReasonName(e.done->finish_reason);
    results_[e.sample] = std::move(e.done);
    ++finished_;
    return true;
  }
  msg->token_ids.push_back(e.token);
  msg->logprobs.push_back(e.logprob);
  ++sent_tokens_[e.sample];
  if (base_.sampling.num_top_logprobs > 0) msg->top_logprobs.push_back(std::move(e.top));
  msg->text.append(texts_[e.sample]->Add(e.token));
  if (texts_[e.sample]->stopped()) {
    // End the sample now (keeping its handle when asked); its result follows.
    core_->loop()->Stop(ids_[e.sample]);
    stopping_[e.sample] = true;
  }
  return true;
}

bool GenerateSession::Drain(std::vector<GenerateUpdate>* out, absl::Status* status) {
  if (ended_) return true;
  std::deque<Event> batch;
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    batch.swap(channel_->events);
  }
  // One message per sample with news, in sample order.
  std::vector<std::optional<GenerateUpdate>> msgs(n_);
  for (Event& e : batch) {
    if (e.sample < 0) {  // the shared prefill of n > 1
      if (!e.done->status.ok()) return End(e.done->status, status);
      shared_handle_ = e.done->handle;
      prompt_tokens_ = e.done->prefix_tokens + static_cast<int32_t>(base_.prompt.size());
      cached_tokens_ = e.done->cached_tokens;
      if (absl::Status st = SubmitSamples(); !st.ok()) return End(st, status);
      continue;
    }
    if (!ApplyEvent(e, msgs[e.sample], status)) return true;
  }
  for (auto& msg : msgs) {
    if (!msg) continue;
    if (first_) {
      msg->prompt_token_ids = base_.prompt;
      first_ = false;
    }
    out->push_back(std::move(*msg));
  }
  if (!samples_submitted_ || finished_ < n_) return false;
  out->push_back(FinalUpdate());
  ended_ = true;  // the handles kept now belong to the client
  {
    std::lock_guard<std::mutex> lock(channel_->mu);
    channel_->notify = nullptr;
  }
  *status = absl::OkStatus();
  return true;
}

}  // namespace shardlm
