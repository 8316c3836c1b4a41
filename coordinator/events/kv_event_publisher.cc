#include "coordinator/events/kv_event_publisher.h"

#include <zmq.h>

#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace shardlm {
namespace {

constexpr int kLingerMs = 1000;  // on close, queued messages get this long to go out
constexpr int kReplayPollMs = 10;

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

// vLLM's rule, so that the same endpoint means the same here: bind a
// wildcard or a local transport, connect to anything else.
bool Binds(const std::string& endpoint) {
  return absl::StrContains(endpoint, "*") || absl::StrContains(endpoint, "::") ||
         absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://");
}

std::string LastEndpoint(void* socket, const std::string& fallback) {
  char buf[256];
  size_t len = sizeof(buf);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf, &len) != 0 || len == 0) return fallback;
  return std::string(buf, strnlen(buf, len));
}

bool SendFrames(void* socket, const std::vector<const std::string*>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket, frames[i]->data(), frames[i]->size(), flags) < 0) return false;
  }
  return true;
}

// Every frame of one message.
std::vector<std::string> ReceiveFrames(void* socket) {
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      break;
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return frames;
}

int64_t FromSequenceFrame(const std::string& frame) {
  uint64_t v = 0;
  for (unsigned char c : frame) v = (v << 8) | c;
  return static_cast<int64_t>(v);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(KvEventPublisherOptions options) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(options)));
  SHARDLM_RETURN_IF_ERROR(p->Open());
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

absl::Status KvEventPublisher::Open() {
  context_ = zmq_ctx_new();
  if (context_ == nullptr) return absl::InternalError(absl::StrCat("ZeroMQ: ", ZmqError()));
  pub_ = zmq_socket(context_, ZMQ_PUB);
  const int hwm = options_.send_high_water_mark;
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
  zmq_setsockopt(pub_, ZMQ_LINGER, &kLingerMs, sizeof(kLingerMs));
  const std::string& ep = options_.endpoint;
  if ((Binds(ep) ? zmq_bind(pub_, ep.c_str()) : zmq_connect(pub_, ep.c_str())) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-events-endpoint: cannot ", Binds(ep) ? "bind" : "connect", " '", ep, "': ", ZmqError()));
  }
  endpoint_ = LastEndpoint(pub_, ep);
  if (options_.replay_endpoint.empty()) return absl::OkStatus();
  replay_ = zmq_socket(context_, ZMQ_ROUTER);
  const int no_linger = 0;
  zmq_setsockopt(replay_, ZMQ_LINGER, &no_linger, sizeof(no_linger));
  if (zmq_bind(replay_, options_.replay_endpoint.c_str()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-events-replay-endpoint: cannot bind '",
                                                   options_.replay_endpoint, "': ", ZmqError()));
  }
  replay_endpoint_ = LastEndpoint(replay_, options_.replay_endpoint);
  return absl::OkStatus();
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (context_ != nullptr) zmq_ctx_term(context_);  // waits up to kLingerMs for what was sent
}

void KvEventPublisher::Publish(std::vector<KvEvent> events) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= options_.max_queued_batches) {
      if (dropped_.fetch_add(1) % 1000 == 0) {
        LOG(WARNING) << "KV events: " << queue_.size() << " batches waiting to be sent; dropping ("
                     << dropped_.load() << " dropped so far)";
      }
      return;
    }
    queue_.push_back(Batch{NowSeconds(), std::move(events)});
  }
  cv_.notify_one();
}

void KvEventPublisher::Run() {
  for (;;) {
    std::deque<Batch> batches;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // With a replay socket the wait is short: its requests are polled below.
      const auto wait = std::chrono::milliseconds(replay_ != nullptr ? 0 : 100);
      cv_.wait_for(lock, wait, [this] { return stopping_ || !queue_.empty(); });
      batches.swap(queue_);
      stopping = stopping_;
    }
    for (const Batch& b : batches) Send(b);
    if (replay_ != nullptr) {
      zmq_pollitem_t item{replay_, 0, ZMQ_POLLIN, 0};
      if (zmq_poll(&item, 1, stopping ? 0 : kReplayPollMs) > 0) ServeReplay();
    }
    if (stopping) return;  // the queue was emptied above, under the lock that saw stopping_
  }
}

void KvEventPublisher::Send(const Batch& batch) {
  const int64_t seq = next_seq_++;
  const std::string seq_frame = SequenceFrame(seq);
  std::string payload = EncodeKvEventBatch(batch.timestamp_s, batch.events, options_.format);
  if (!SendFrames(pub_, {&options_.topic, &seq_frame, &payload})) {
    LOG(WARNING) << "KV events: sending batch " << seq << " failed: " << ZmqError();
  }
  if (options_.replay_batches == 0) return;
  kept_.emplace_back(seq, std::move(payload));
  while (kept_.size() > options_.replay_batches) kept_.pop_front();
}

void KvEventPublisher::ServeReplay() {
  std::vector<std::string> frames = ReceiveFrames(replay_);
  // [identity, "", start] from REQ (or DEALER with a delimiter); [identity, start] from a bare DEALER.
  if (frames.size() < 2 || frames.back().size() != 8) {
    LOG(WARNING) << "KV events: ignoring a replay request of " << frames.size() << " frame(s)";
    return;
  }
  const int64_t start = FromSequenceFrame(frames.back());
  frames.pop_back();  // what is left is the envelope, echoed before each reply
  std::vector<const std::string*> reply;
  for (const std::string& f : frames) reply.push_back(&f);
  const size_t envelope = reply.size();
  for (const auto& [seq, payload] : kept_) {
    if (seq < start) continue;
    const std::string seq_frame = SequenceFrame(seq);
    reply.resize(envelope);
    reply.push_back(&seq_frame);
    reply.push_back(&payload);
    SendFrames(replay_, reply);
  }
  const std::string end = SequenceFrame(-1);
  const std::string empty;
  reply.resize(envelope);
  reply.push_back(&end);
  reply.push_back(&empty);
  SendFrames(replay_, reply);
}

}  // namespace shardlm
