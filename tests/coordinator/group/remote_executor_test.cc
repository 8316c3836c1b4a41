// RemoteExecutor::Connect's handshake against real gRPC servers over loopback
// that answer as worker ranks do. The case here is a formation that is
// already over: when a group fails, its ranks register again and serve the
// next epoch, so a coordinator that handshakes the failed epoch's formation
// must be told so at once. It used to read "serving epoch 2, not 1" as "still
// joining" and retry until its 120 s handshake deadline, which left the group
// down for two minutes after a recovered network partition.
#include "coordinator/group/remote_executor.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "worker/worker_server.h"

namespace shardlm {
namespace {

namespace wpb = ::shardlm::worker::v1;

constexpr char kFingerprint[] = "fingerprint-of-the-test";

// Answers Handshake as a loaded rank serving `epoch`.
class HandshakeOnly final : public wpb::Worker::Service {
 public:
  HandshakeOnly(int rank, uint64_t epoch) : rank_(rank), epoch_(epoch) {}
  grpc::Status Handshake(grpc::ServerContext*, const wpb::HandshakeRequest* req,
                         wpb::HandshakeResponse* resp) override {
    if (req->model_fingerprint() != kFingerprint) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "fingerprint");
    }
    resp->set_rank(rank_);
    resp->set_world_size(2);
    resp->set_epoch(epoch_);
    resp->set_num_blocks(64);
    resp->set_block_size(16);
    return grpc::Status::OK;
  }

 private:
  int rank_;
  uint64_t epoch_;
};

struct FakeRank {
  FakeRank(int rank, uint64_t epoch) : service(rank, epoch) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeRank() { server->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  HandshakeOnly service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

RemoteExecutorOptions Options() {
  RemoteExecutorOptions o;
  o.handshake_timeout = std::chrono::milliseconds(30000);
  return o;
}

TEST(RemoteExecutorHandshakeTest, ConnectsWhenEveryRankServesTheEpoch) {
  FakeRank r0(0, 3), r1(1, 3);
  ASSERT_NE(r0.port, 0);
  ASSERT_NE(r1.port, 0);
  auto exec = RemoteExecutor::Connect({r0.address(), r1.address()}, 3, kFingerprint, Options());
  ASSERT_TRUE(exec.ok()) << exec.status();
  EXPECT_EQ((*exec)->epoch(), 3u);
  EXPECT_EQ((*exec)->num_blocks(), 64);
}

TEST(RemoteExecutorHandshakeTest, AFormationItsRanksHaveLeftFailsAtOnce) {
  // Rank 0 already serves epoch 2; the coordinator handshakes epoch 1.
  FakeRank r0(0, 2), r1(1, 2);
  ASSERT_NE(r0.port, 0);
  const auto start = std::chrono::steady_clock::now();
  auto exec = RemoteExecutor::Connect({r0.address(), r1.address()}, 1, kFingerprint, Options());
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(exec.ok());
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kAborted) << exec.status();
  EXPECT_NE(exec.status().message().find("epoch 1 is over, the rank already serves epoch 2"),
            std::string::npos)
      << exec.status();
  EXPECT_NE(exec.status().message().find("rank 0 at " + r0.address()), std::string::npos) << exec.status();
  // Well inside the 30 s handshake deadline it used to wait out.
  EXPECT_LT(took, std::chrono::seconds(5));
}

}  // namespace
}  // namespace shardlm
