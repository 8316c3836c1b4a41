#include "cli/api_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"

namespace shardlm {

namespace pb = ::shardlm::v1;

void AddApiClientFlags(FlagSet& f, ApiClientFlags* out) {
  f.String("tls-ca", "PEM CA that signed the server's certificate (connects with TLS)")
      .To(&out->tls.client_ca);
  f.String("tls-cert", "PEM certificate of this client (servers that require mutual TLS)").To(&out->tls.cert);
  f.String("tls-key", "PEM private key for --tls-cert").To(&out->tls.key);
  f.String("api-key-file", "file holding the API key, sent as 'authorization: Bearer KEY'")
      .To(&out->api_key_file);
}

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Connect(const ApiClientFlags& flags) {
  auto client = std::make_unique<ApiClient>();
  client->server_ = flags.server;
  if (client->server_.empty()) return absl::InvalidArgumentError("--server must be HOST:PORT");
  auto creds = ChannelCredentials(flags.tls, "--tls", "--tls-ca");
  if (!creds.ok()) return creds.status();
  if (flags.api_key_file) {
    auto key = ReadTokenFile(*flags.api_key_file, "--api-key-file");
    if (!key.ok()) return key.status();
    client->api_key_ = *key;
  }
  client->channel_ = grpc::CreateCustomChannel(client->server_, *creds, InternalChannelArguments());
  client->stub_ = pb::Inference::NewStub(client->channel_);
  return client;
}

void ApiClient::Prepare(grpc::ClientContext& ctx, double timeout_s) const {
  if (!api_key_.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key_);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
}

// One stream: reads every message, timestamps it, and reports once at the end.
class GenerateStreams::Reactor : public grpc::ClientReadReactor<pb::GenerateResponse> {
 public:
  Reactor(GenerateStreams* owner, const pb::GenerateRequest& request, DoneFn done)
      : owner_(owner), request_(request), done_(std::move(done)) {}

  void Begin() {
    owner_->client_->Prepare(ctx_, owner_->timeout_s_);
    record_.start = StreamRecord::Clock::now();
    owner_->client_->stub().async()->Generate(&ctx_, &request_, this);
    StartRead(&msg_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream is over; OnDone follows
    const auto now = StreamRecord::Clock::now();
    if (msg_.sample() == 0) {
      if (msg_.token_ids_size() > 0) record_.arrivals.emplace_back(now, msg_.token_ids_size());
      record_.tokens.insert(record_.tokens.end(), msg_.token_ids().begin(), msg_.token_ids().end());
      record_.text += msg_.text();
    }
    for (const pb::SampleResult& r : msg_.results()) {
      if (r.sample() == 0) record_.finish_reason = r.finish_reason();
    }
    if (msg_.has_usage()) record_.prompt_tokens = msg_.usage().prompt_tokens();
    StartRead(&msg_);
  }

  // The reactor (and with it the ClientContext, the last hold on the call)
  // is gone before `done` runs and before WaitIdle can return, so nothing of
  // the call outlives the channel or the process.
  void OnDone(const grpc::Status& status) override {
    record_.status = status;
    record_.end = StreamRecord::Clock::now();
    GenerateStreams* owner = owner_;
    DoneFn done = std::move(done_);
    StreamRecord record = std::move(record_);
    owner->Forget(this);
    delete this;
    done(std::move(record));
    owner->Release();
  }

 private:
  GenerateStreams* owner_;
  grpc::ClientContext ctx_;
  pb::GenerateRequest request_;
  pb::GenerateResponse msg_;
  DoneFn done_;
  StreamRecord record_;
};

GenerateStreams::~GenerateStreams() {
  CancelAll();
  WaitIdle();
}

void GenerateStreams::Start(const pb::GenerateRequest& request, DoneFn done) {
  auto* r = new Reactor(this, request, std::move(done));
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(r);
    ++pending_;
  }
  r->Begin();
}

int GenerateStreams::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

void GenerateStreams::CancelAll() {
  // A reactor leaves live_ (under mu_) before it is deleted, so each one
  // seen here is still alive.
  std::lock_guard<std::mutex> lock(mu_);
  for (Reactor* r : live_) r->Cancel();
}

void GenerateStreams::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return pending_ == 0; });
}

void GenerateStreams::Forget(Reactor* r) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(r);
}

void GenerateStreams::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--pending_ == 0) idle_.notify_all();
}

std::string GrpcCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace shardlm
