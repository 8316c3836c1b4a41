#include "worker/worker_service.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "proto/step_codec.h"
#include "proto/worker_protocol.h"
#include "worker/worker_server.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

// The request ids a step serves, for its log lines ("-" for none).
std::string RequestIds(const wpb::StepRequest& req) {
  std::string out;
  for (const wpb::Sequence& s : req.sequences()) {
    if (s.request_id().empty()) continue;
    if (!out.empty()) out += ",";
    out += s.request_id();
  }
  return out.empty() ? "-" : out;
}

// One line per request when it first runs here, carrying the coordinator's
// request id, so a request can be followed from its log line there.
void LogStarts(const wpb::StepRequest& req, int rank) {
  for (int i = 0; i < req.sequences_size(); ++i) {
    const wpb::Sequence& s = req.sequences(i);
    if (!s.starts() || s.request_id().empty()) continue;
    int tokens = 0;
    for (int32_t q : req.seq_of_token()) tokens += q == i;
    LOG(INFO) << "request " << s.request_id() << ": rank " << rank << " starts it in step " << req.step_id()
              << " (" << tokens << " tokens)";
  }
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

}  // namespace

WorkerService::WorkerService(std::string fingerprint, std::string token)
    : compute_([threads = at::get_num_threads()] { at::set_num_threads(threads); }),
      fingerprint_(std::move(fingerprint)),
      token_(std::move(token)) {}

void WorkerService::SetReady(RankWorker* worker, TimedCommunicator* comm, int64_t kv_bytes, uint64_t epoch) {
  std::lock_guard<std::mutex> lock(mu_);
  worker_ = worker;
  comm_ = comm;
  kv_bytes_ = kv_bytes;
  epoch_ = epoch;
  last_step_ = 0;  // a new group's coordinator numbers its steps from 1
  masks_.Reset();  // and its epochs too, when it is a new process
  SetState(absl::OkStatus(), "ready");
}

void WorkerService::SetNotReady(absl::Status why) {
  std::lock_guard<std::mutex> lock(mu_);
  epoch_ = 0;
  SetState(why, std::string(why.message()));
}

void WorkerService::MarkLeaving(uint64_t epoch) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (state_.ok()) state_ = absl::UnavailableError(absl::StrCat("leaving epoch ", epoch, " to rejoin"));
}

bool WorkerService::Ready() {
  std::lock_guard<std::mutex> lock(state_mu_);
  return state_.ok();
}

grpc::Status WorkerService::Handshake(grpc::ServerContext* ctx, const wpb::HandshakeRequest* req,
                                      wpb::HandshakeResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  std::lock_guard<std::mutex> lock(mu_);
  if (req->protocol_version() != kWorkerProtocolVersion) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker protocol version ", kWorkerProtocolVersion,
                                     ", coordinator speaks ", req->protocol_version()));
  }
  if (req->model_fingerprint() != fingerprint_) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "model fingerprint " + fingerprint_ + " differs from the coordinator's " + req->model_fingerprint());
  }
  absl::Status state = State();
  if (!state.ok()) return ToGrpcStatus(state);
  const RankInfo rank = worker_->model().plan().rank();
  resp->set_rank(rank.rank);
  resp->set_world_size(rank.world_size);
  resp->set_epoch(epoch_);
  resp->set_num_blocks(worker_->num_blocks());
  resp->set_block_size(worker_->block_size());
  resp->set_weight_bytes(worker_->model().weight_bytes());
  resp->set_kv_cache_bytes(kv_bytes_);
  resp->set_resident_bytes(ResidentBytes());
  return grpc::Status::OK;
}

grpc::Status WorkerService::Step(grpc::ServerContext* ctx, const wpb::StepRequest* req,
                                 wpb::StepResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  std::unique_lock<std::mutex> lock(mu_);
  struct DropMasks {
    MaskMailbox* mailbox;
    StepKey step;
    ~DropMasks() { mailbox->DropThrough(step); }  // run or refused: late masks are not kept
  } drop_masks{&masks_, {req->epoch(), req->step_id()}};
  if (absl::Status turn = AwaitTurn(ctx, *req, lock); !turn.ok()) return ToGrpcStatus(turn);
  // Whatever happens below, the steps sent after this one may go.
  struct Ran {
    WorkerService* self;
    uint64_t id;
    ~Ran() {
      self->last_step_ = id;
      self->order_cv_.notify_all();
    }
  } ran{this, req->step_id()};
  return ToGrpcStatus(RunStep(ctx, *req, resp));
}

absl::Status WorkerService::AwaitTurn(grpc::ServerContext* ctx, const wpb::StepRequest& req,
                                      std::unique_lock<std::mutex>& lock) {
  auto stale = [&] {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", req.step_id(), " was planned for epoch ", req.epoch(), "; rank ",
        worker_ != nullptr ? worker_->model().plan().rank().rank : -1, " serves epoch ", epoch_));
  };
  if (req.epoch() != epoch_) return stale();
  if (req.after_step_id() != 0) {
    while (last_step_ != req.after_step_id() && State().ok() && req.epoch() == epoch_) {
      if (ctx->IsCancelled() || std::chrono::system_clock::now() > ctx->deadline()) {
        // The steps sent after this one would wait for it in turn: this
        // rank's step stream is broken, and the group must be formed again.
        absl::Status broken = absl::UnavailableError(absl::StrCat(
            "rank ", worker_->model().plan().rank().rank, ": step ", req.step_id(), " waited for step ",
            req.after_step_id(), ", which never ran here (the last was ", last_step_, ")"));
        SetState(broken, std::string(broken.message()));
        return broken;
      }
      order_cv_.wait_for(lock, std::chrono::milliseconds(50));
    }
    if (req.epoch() != epoch_) return stale();
  }
  return State();
}

absl::Status WorkerService::RunStep(grpc::ServerContext* ctx, const wpb::StepRequest& req,
                                    wpb::StepResponse* resp) {
  const auto start = Clock::now();
  const ModelConfig& cfg = worker_->config();
  StepLimits limits{cfg.vocab_size, worker_->num_blocks(), worker_->block_size(),
                    cfg.max_position_embeddings};
  auto decoded = DecodeStep(req, limits);
  if (!decoded.ok()) {
    worker_->ForgetSampled();  // a step fed back from this one finds nothing, on every rank
    return decoded.status();
  }
  if (MasksFollow((*decoded)->step)) {
    (*decoded)->step.await_masks = AwaitMasks(&masks_, {req.epoch(), req.step_id()}, cfg.vocab_size, [ctx] {
      return ctx->IsCancelled() || std::chrono::system_clock::now() > ctx->deadline();
    });
  }
  comm_->TakeMicros();
  const int rank = worker_->model().plan().rank().rank;
  LogStarts(req, rank);
  absl::StatusOr<std::vector<RowResult>> rows;
  compute_.Run([&] { rows = worker_->Execute((*decoded)->step); });
  if (!rows.ok()) {
    LOG(ERROR) << "step " << req.step_id() << " (requests " << RequestIds(req) << ") failed on rank " << rank
               << ": " << rows.status();
    absl::Status failed = absl::UnavailableError(absl::StrCat("rank ", rank, ": ", rows.status().message()));
    SetState(failed, std::string(failed.message()));
    return failed;
  }
  EncodeRows(*rows, resp);
  resp->mutable_timing()->set_collective_us(comm_->TakeMicros());
  resp->mutable_timing()->set_total_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  return absl::OkStatus();
}

grpc::Status WorkerService::StepMasks(grpc::ServerContext* ctx, const wpb::StepMasksRequest* req,
                                      wpb::StepMasksResponse*) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  absl::StatusOr<std::vector<RowMask>> masks = DecodeMasks(*req);
  const grpc::Status answer = masks.ok() ? grpc::Status::OK : ToGrpcStatus(masks.status());
  masks_.Put({req->epoch(), req->step_id()}, std::move(masks));  // an error fails the step too
  return answer;
}

grpc::Status WorkerService::Health(grpc::ServerContext* ctx, const wpb::HealthRequest*,
                                   wpb::HealthResponse* resp) {
  if (!HasInternalToken(*ctx, token_)) return InternalTokenDenied();
  std::lock_guard<std::mutex> lock(state_mu_);
  resp->set_ready(state_.ok());
  resp->set_status(state_text_);
  return grpc::Status::OK;
}

absl::Status WorkerService::State() {
  std::lock_guard<std::mutex> lock(state_mu_);
  return state_;
}

void WorkerService::SetState(absl::Status st, std::string text) {
  std::lock_guard<std::mutex> lock(state_mu_);
  state_ = std::move(st);
  state_text_ = std::move(text);
}

}  // namespace shardlm
