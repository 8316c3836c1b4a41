// The publisher over real ZeroMQ sockets on loopback: what a subscriber
// receives (topic, sequence numbers, vLLM's MessagePack layout, read back
// with msgpack-c's own unpacker), the replay socket, and endpoint errors.
#include "coordinator/events/kv_event_publisher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.h>
#include <zmq.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<std::string> Receive(void* socket, int timeout_ms) {
  zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, 0) < 0) {
      zmq_msg_close(&msg);
      return {};
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return frames;
}

// msgpack-c's object tree of one payload (its strings point into `bytes`, kept here).
struct Decoded {
  std::string bytes;
  msgpack_unpacked unpacked;
  explicit Decoded(std::string payload) : bytes(std::move(payload)) {
    msgpack_unpacked_init(&unpacked);
    size_t offset = 0;
    EXPECT_EQ(msgpack_unpack_next(&unpacked, bytes.data(), bytes.size(), &offset), MSGPACK_UNPACK_SUCCESS);
    EXPECT_EQ(offset, bytes.size());
  }
  ~Decoded() { msgpack_unpacked_destroy(&unpacked); }
  const msgpack_object& root() const { return unpacked.data; }
};

std::string Str(const msgpack_object& o) {
  EXPECT_EQ(o.type, MSGPACK_OBJECT_STR);
  return std::string(o.via.str.ptr, o.via.str.size);
}

std::vector<KvEvent> SomeEvents() {
  KvEventLog log;
  const int32_t tokens[4] = {11, 12, 13, 14};
  log.Stored(0xF000000000000001ull, std::nullopt, tokens, 2);
  log.Stored(7, 0xF000000000000001ull, tokens + 2, 2);
  log.Removed(3);
  return log.Take();
}

TEST(KvEventEncodingTest, VllmsArrayLayout) {
  KvEventFormat format;
  format.block_size = 2;
  format.medium = "CPU";
  format.data_parallel_rank = 0;
  std::vector<KvEvent> events = SomeEvents();
  events.push_back(KvEvent{KvEvent::Kind::kAllCleared, {}, std::nullopt, {}});
  Decoded d(EncodeKvEventBatch(1234.5, events, format));
  const msgpack_object& batch = d.root();
  ASSERT_EQ(batch.type, MSGPACK_OBJECT_ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
  EXPECT_DOUBLE_EQ(batch.via.array.ptr[0].via.f64, 1234.5);
  EXPECT_EQ(batch.via.array.ptr[2].via.u64, 0u);
  const msgpack_object_array& list = batch.via.array.ptr[1].via.array;
  ASSERT_EQ(list.size, 3u);

  const msgpack_object_array& stored = list.ptr[0].via.array;
  ASSERT_EQ(stored.size, 7u);
  EXPECT_EQ(Str(stored.ptr[0]), "BlockStored");
  ASSERT_EQ(stored.ptr[1].via.array.size, 2u);
  EXPECT_EQ(stored.ptr[1].via.array.ptr[0].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
  EXPECT_EQ(stored.ptr[1].via.array.ptr[0].via.u64, 0xF000000000000001ull) << "hashes are unsigned 64-bit";
  EXPECT_EQ(stored.ptr[1].via.array.ptr[1].via.u64, 7u);
  EXPECT_EQ(stored.ptr[2].type, MSGPACK_OBJECT_NIL) << "the first block has no parent";
  ASSERT_EQ(stored.ptr[3].via.array.size, 4u);
  EXPECT_EQ(stored.ptr[3].via.array.ptr[3].via.u64, 14u);
  EXPECT_EQ(stored.ptr[4].via.u64, 2u);
  EXPECT_EQ(stored.ptr[5].type, MSGPACK_OBJECT_NIL);
  EXPECT_EQ(Str(stored.ptr[6]), "CPU");

  const msgpack_object_array& removed = list.ptr[1].via.array;
  ASSERT_EQ(removed.size, 3u);
  EXPECT_EQ(Str(removed.ptr[0]), "BlockRemoved");
  EXPECT_EQ(removed.ptr[1].via.array.ptr[0].via.u64, 3u);
  EXPECT_EQ(Str(removed.ptr[2]), "CPU");

  ASSERT_EQ(list.ptr[2].via.array.size, 1u);
  EXPECT_EQ(Str(list.ptr[2].via.array.ptr[0]), "AllBlocksCleared");
}

TEST(KvEventEncodingTest, SequenceFramesAreBigEndian) {
  EXPECT_EQ(SequenceFrame(1), std::string("\0\0\0\0\0\0\0\1", 8));
  EXPECT_EQ(SequenceFrame(258), std::string("\0\0\0\0\0\0\1\2", 8));
  EXPECT_EQ(SequenceFrame(-1), std::string(8, '\xff'));
}

class KvEventPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override { context_ = zmq_ctx_new(); }
  void TearDown() override {
    for (void* s : sockets_) zmq_close(s);
    zmq_ctx_term(context_);
  }
  void* Socket(int type, const std::string& endpoint) {
    void* s = zmq_socket(context_, type);
    const int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    EXPECT_EQ(zmq_connect(s, endpoint.c_str()), 0) << zmq_strerror(zmq_errno());
    sockets_.push_back(s);
    return s;
  }

  void* context_ = nullptr;
  std::vector<void*> sockets_;
};

TEST_F(KvEventPublisherTest, SubscribersGetNumberedBatchesAndReplayFillsWhatTheyMissed) {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.topic = "kv@pod-0@model";
  auto publisher = KvEventPublisher::Start(o);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  KvEventPublisher& p = **publisher;
  ASSERT_THAT(p.endpoint(), ::testing::StartsWith("tcp://127.0.0.1:"));
  ASSERT_NE(p.endpoint(), "tcp://127.0.0.1:*");

  void* sub = Socket(ZMQ_SUB, p.endpoint());
  zmq_setsockopt(sub, ZMQ_SUBSCRIBE, o.topic.data(), o.topic.size());
  // A subscription reaches the publisher asynchronously: batches go out
  // until one arrives; the ones before it are what replay must give back.
  std::vector<std::string> frames;
  int sent = 0;
  while (frames.empty() && sent < 100) {
    p.Publish(SomeEvents());
    ++sent;
    frames = Receive(sub, 100);
  }
  ASSERT_EQ(frames.size(), 3u) << "subscribed after " << sent << " batches";
  EXPECT_EQ(frames[0], o.topic);
  const std::string first_seen = frames[1];
  Decoded d(frames[2]);
  EXPECT_EQ(d.root().via.array.size, 3u);
  p.Publish(SomeEvents());
  frames = Receive(sub, 2000);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_GT(frames[1], first_seen) << "numbers go up by one per batch (big-endian compares as bytes)";

  // Replay from 0: every batch sent (all are kept), in order, then -1.
  void* dealer = Socket(ZMQ_DEALER, p.replay_endpoint());
  const std::string empty;
  const std::string start = SequenceFrame(0);
  zmq_send(dealer, empty.data(), 0, ZMQ_SNDMORE);
  zmq_send(dealer, start.data(), start.size(), 0);
  for (int i = 0; i <= sent; ++i) {
    frames = Receive(dealer, 2000);
    ASSERT_EQ(frames.size(), 3u) << "replayed batch " << i;
    EXPECT_EQ(frames[0], "");
    EXPECT_EQ(frames[1], SequenceFrame(i));
    Decoded replayed(frames[2]);
    EXPECT_EQ(replayed.root().via.array.size, 3u);
  }
  frames = Receive(dealer, 2000);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1], SequenceFrame(-1));
  EXPECT_EQ(frames[2], "");
  EXPECT_EQ(p.dropped(), 0);
}

TEST(KvEventPublisherErrorsTest, AnEndpointThatCannotBeUsedNamesItsFlag) {
  KvEventPublisherOptions o;
  o.endpoint = "nonsense://*:1";
  EXPECT_THAT(KvEventPublisher::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--kv-events-endpoint: cannot bind")));
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://256.1.1.1:*";
  EXPECT_THAT(KvEventPublisher::Start(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("--kv-events-replay-endpoint: cannot bind")));
}

}  // namespace
}  // namespace shardlm
