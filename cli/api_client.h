// A client of the public API (shardlm.v1.Inference) for the commands that send
// many calls at once: `batch --server` and `bench`. It owns the connection
// flags (TLS, API key) and runs Generate streams on gRPC's callback API, so
// that hundreds of streams in flight cost no thread each and every message is
// timestamped on arrival.
//
//   ApiClientFlags c;
//   FlagSet f("bench");
//   f.String("server", "HOST:PORT", /*required=*/true).To(&c.server);
//   AddApiClientFlags(f, &c);  // --tls-ca, --tls-cert, --tls-key, --api-key-file
//   ...parse...
//   SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> client, ApiClient::Connect(c));
//   GenerateStreams streams(client.get(), /*timeout_s=*/600);
//   streams.Start(request, [](StreamRecord r) { /* on a gRPC thread */ });
//   streams.WaitIdle();
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "common/grpc_security.h"
#include "shardlm/v1/inference.grpc.pb.h"

namespace shardlm {

// --tls-ca (the CA that signed the server: switches TLS on), --tls-cert and
// --tls-key (this client's certificate, for a server that requires mutual
// TLS) and --api-key-file (sent as 'authorization: Bearer KEY'). The command
// declares --server itself (required or not) and binds it to `server`.
struct ApiClientFlags {
  std::string server;
  TlsFiles tls;  // client_ca: --tls-ca
  std::optional<std::string> api_key_file;
};
void AddApiClientFlags(FlagSet& f, ApiClientFlags* out);

class ApiClient {
 public:
  // Connects to --server with the flags above. Connecting is lazy: an
  // unreachable server shows up as each call's UNAVAILABLE.
  static absl::StatusOr<std::unique_ptr<ApiClient>> Connect(const ApiClientFlags& flags);

  // Adds the API key and a deadline `timeout_s` from now.
  void Prepare(grpc::ClientContext& ctx, double timeout_s) const;
  ::shardlm::v1::Inference::Stub& stub() { return *stub_; }
  const std::string& server() const { return server_; }

 private:
  std::string server_;
  std::string api_key_;  // empty: none
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::shardlm::v1::Inference::Stub> stub_;
};

// What one Generate stream brought back (sample 0 only: these commands send n = 1).
struct StreamRecord {
  using Clock = std::chrono::steady_clock;
  grpc::Status status;
  Clock::time_point start, end;  // the call started; its status arrived
  // Per message that carried tokens: when it arrived and how many it carried.
  std::vector<std::pair<Clock::time_point, int32_t>> arrivals;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;  // "length" | "stop" (empty on failure)
  int32_t prompt_tokens = 0;  // from the usage
};

// Generate streams in flight over one client, each with a deadline.
class GenerateStreams {
 public:
  using DoneFn = std::function<void(StreamRecord)>;
  GenerateStreams(ApiClient* client, double timeout_s) : client_(client), timeout_s_(timeout_s) {}
  // Cancels whatever is still in flight and waits for it to end.
  ~GenerateStreams();

  // Starts a stream; `done` is called once, on a gRPC thread, when it ends
  // (keep it short; it must not call back into this object).
  void Start(const ::shardlm::v1::GenerateRequest& request, DoneFn done);
  int in_flight();
  // Cancels every stream in flight (each ends CANCELLED through its `done`).
  void CancelAll();
  // Returns once no stream is in flight.
  void WaitIdle();

 private:
  class Reactor;
  void Forget(Reactor* r);  // no longer cancellable (it is being deleted)
  void Release();           // its `done` has returned

  ApiClient* client_;
  double timeout_s_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<Reactor*> live_;  // started, not yet being deleted
  int pending_ = 0;          // started, `done` not yet returned
};

// "UNAUTHENTICATED", "DEADLINE_EXCEEDED", ... for a gRPC status code.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace shardlm
