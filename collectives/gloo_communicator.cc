#include "collectives/gloo_communicator.h"

#include <ATen/ATen.h>
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(RankInfo rank, std::shared_ptr<gloo::Context> ctx) : rank_(rank), ctx_(std::move(ctx)) {}

  RankInfo rank_info() const override { return rank_; }

  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    at::Tensor out;
    absl::Status st = Run("all-gather", [&] {
      const int64_t n = rank_.world_size;
      // Gather rank-major: gathered[r] = rank r's shard, as raw bytes.
      at::Tensor src = shard.contiguous();
      std::vector<int64_t> gshape = {n};
      gshape.insert(gshape.end(), src.sizes().begin(), src.sizes().end());
      at::Tensor gathered = at::empty(gshape, src.options());
      if (n == 1) {
        gathered.copy_(src.unsqueeze(0));  // Gloo's ring algorithms need two ranks
      } else {
        Prepared& p = Prepare(Op::kAllGather, static_cast<int64_t>(src.nbytes()));
        std::memcpy(p.in.data(), src.data_ptr(), src.nbytes());
        p.algorithm->run();
        std::memcpy(gathered.data_ptr(), p.out.data(), gathered.nbytes());
      }
      // [n, ..., d, ...] -> [..., n * d, ...]
      const int64_t d = dim < 0 ? dim + src.dim() : dim;
      out = gathered.movedim(0, d).flatten(d, d + 1).contiguous();
    });
    if (!st.ok()) return st;
    return out;
  }

  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    const int64_t n = rank_.world_size;
    const int64_t d = dim < 0 ? dim + partial.dim() : dim;
    const int64_t size = partial.size(d);
    if (size % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("reduce-scatter: dimension ", d, " of size ", size,
                                                     " does not divide by world size ", n));
    }
    if (n == 1) return partial;
    // A ring reduce-scatter: each rank sends (n-1)/n of the tensor once, not
    // the whole of it twice as an all-reduce would. Chunks are made
    // contiguous first: chunks[r] = slice r along dim. Two ranks exchange the
    // compute dtype (a bf16 + bf16 sum in f32 rounds exactly as the f32 round
    // trip does); more ranks accumulate in f32 so that the result does not
    // depend on the order of the ring.
    const at::ScalarType wire = (n == 2) ? partial.scalar_type() : at::kFloat;
    at::Tensor chunks = partial.unflatten(d, {n, size / n}).movedim(d, 0).to(wire).contiguous();
    at::Tensor incoming = at::empty(chunks.select(0, 0).sizes(), chunks.options());
    const size_t chunk_bytes = incoming.nbytes();
    absl::Status st = Run("reduce-scatter", [&] {
      const int right = (rank_.rank + 1) % n, left = (rank_.rank + n - 1) % n;
      auto send_buf = ctx_->createUnboundBuffer(chunks.data_ptr(), chunks.nbytes());
      auto recv_buf = ctx_->createUnboundBuffer(incoming.data_ptr(), chunk_bytes);
      for (int64_t s = 0; s < n - 1; ++s) {
        const uint64_t slot = NextSlot();
        const int64_t send_idx = ((rank_.rank - s - 1) % n + n) % n;
        const int64_t recv_idx = ((rank_.rank - s - 2) % n + n) % n;
        recv_buf->recv(left, slot);
        send_buf->send(right, slot, send_idx * chunk_bytes, chunk_bytes);
        if (!recv_buf->waitRecv(ctx_->getTimeout()) || !send_buf->waitSend(ctx_->getTimeout())) {
          throw std::runtime_error("timed out waiting for a peer");
        }
        at::Tensor dst = chunks.select(0, recv_idx);
        dst.add_(incoming);
      }
    });
    if (!st.ok()) return st;
    // [n, ..., d/n, ...]: this rank's chunk, back in the caller's layout and dtype.
    return chunks.select(0, rank_.rank).to(partial.scalar_type()).contiguous();
  }

  absl::StatusOr<at::Tensor> Gather(const at::Tensor& shard, int64_t dim, int root) override {
    const int64_t n = rank_.world_size;
    if (root < 0 || root >= n) {
      return absl::InvalidArgumentError(absl::StrCat("gather root ", root, " outside world size ", n));
    }
    if (n == 1) return shard;
    at::Tensor src = shard.contiguous();
    at::Tensor gathered;
    if (rank_.rank == root) {
      std::vector<int64_t> gshape = {n};
      gshape.insert(gshape.end(), src.sizes().begin(), src.sizes().end());
      gathered = at::empty(gshape, src.options());
    }
    absl::Status st = Run("gather", [&] {
      const uint64_t slot = NextSlot();
      if (rank_.rank != root) {
        auto buf = ctx_->createUnboundBuffer(src.data_ptr(), src.nbytes());
        buf->send(root, slot);
        if (!buf->waitSend(ctx_->getTimeout())) throw std::runtime_error("timed out sending to the root");
        return;
      }
      std::memcpy(static_cast<char*>(gathered.data_ptr()) + root * src.nbytes(), src.data_ptr(),
                  src.nbytes());
      auto buf = ctx_->createUnboundBuffer(gathered.data_ptr(), gathered.nbytes());
      for (int r = 0; r < n; ++r) {
        if (r != root) buf->recv(r, slot, r * src.nbytes(), src.nbytes());
      }
      for (int r = 0; r < n; ++r) {
        if (r != root && !buf->waitRecv(ctx_->getTimeout())) throw std::runtime_error("timed out receiving");
      }
    });
    if (!st.ok()) return st;
    if (rank_.rank != root) return at::Tensor();
    const int64_t d = dim < 0 ? dim + src.dim() : dim;
    return gathered.movedim(0, d).flatten(d, d + 1).contiguous();
  }

  absl::Status AllReduce(at::Tensor& tensor) override {
    at::Tensor sum = tensor.to(at::kFloat).contiguous();
    absl::Status st = AllReduceF32(sum);
    if (!st.ok()) return st;
    tensor.copy_(sum);
    return absl::OkStatus();
  }

  absl::Status Broadcast(at::Tensor& tensor, int root) override {
    if (root < 0 || root >= rank_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast root ", root, " outside world size ", rank_.world_size));
    }
    at::Tensor buf = tensor.contiguous();
    absl::Status st = Run("broadcast", [&] {
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(buf.data_ptr()), buf.nbytes());
      opts.setRoot(root);
      gloo::broadcast(opts);
    });
    if (st.ok() && !buf.is_same(tensor)) tensor.copy_(buf);
    return st;
  }

  absl::Status Barrier() override {
    return Run("barrier", [&] {
      gloo::BarrierOptions opts(ctx_);
      gloo::barrier(opts);
    });
  }

 private:
  absl::Status AllReduceF32(at::Tensor& sum) {
    if (rank_.world_size == 1) return absl::OkStatus();  // the sum of one rank is itself
    return Run("all-reduce", [&] {
      const int64_t bytes = sum.numel() * static_cast<int64_t>(sizeof(float));
      Prepared& p = Prepare(Op::kAllReduce, bytes);
      std::memcpy(p.in.data(), sum.data_ptr(), bytes);
      p.algorithm->run();
      std::memcpy(sum.data_ptr(), p.in.data(), bytes);
    });
  }

  // Gloo's algorithm classes register their buffers once, at construction;
  // the functional API (gloo::allreduce) does that on every call, which costs
  // ~0.7 ms per small collective here against ~0.08 ms for a prepared one.
  // A forward pass repeats a few sizes, so prepared algorithms are cached by
  // (operation, bytes), each with its own staging buffers. Callers hold mu_.
  enum class Op { kAllGather, kAllReduce };
  struct Prepared {
    std::vector<uint8_t> in, out;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };
  Prepared& Prepare(Op op, int64_t bytes) {
    auto key = std::make_pair(static_cast<int>(op), bytes);
    auto it = prepared_.find(key);
    if (it != prepared_.end()) return it->second;
    if (prepared_.size() >= kMaxPrepared) prepared_.clear();  // prefill sizes vary; keep it bounded
    Prepared& p = prepared_[key];
    p.in.resize(bytes);
    if (op == Op::kAllGather) {
      p.out.resize(bytes * rank_.world_size);
      p.algorithm = std::make_unique<gloo::AllgatherRing<uint8_t>>(
          ctx_, std::vector<const uint8_t*>{p.in.data()}, p.out.data(), static_cast<int>(bytes));
    } else {
      p.algorithm = std::make_unique<gloo::AllreduceRing<float>>(
          ctx_, std::vector<float*>{reinterpret_cast<float*>(p.in.data())},
          static_cast<int>(bytes / sizeof(float)));
    }
    return p;
  }
  static constexpr size_t kMaxPrepared = 64;
  std::map<std::pair<int, int64_t>, Prepared> prepared_;

  // Runs one collective; an exception (timeout, closed peer) breaks the
  // communicator for good, since Gloo's pairs are then in an unknown state.
  template <typename Fn>
  absl::Status Run(const char* what, Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    try {
      fn();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      const bool timeout =
          msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
      std::string text =
          absl::StrCat("gloo ", what, " failed on rank ", rank_.rank, " of ", rank_.world_size, ": ", msg);
      broken_ = timeout ? absl::DeadlineExceededError(text) : absl::UnavailableError(text);
      return broken_;
    }
  }

  // Slots for point-to-point transfers: every rank issues the same sequence
  // of collectives, so the counters agree. Kept apart from the slots Gloo's
  // algorithm classes take from the context.
  uint64_t NextSlot() { return (uint64_t{1} << 40) + next_slot_++; }
  uint64_t next_slot_ = 0;

  RankInfo rank_;
  std::shared_ptr<gloo::Context> ctx_;
  std::mutex mu_;
  absl::Status broken_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    RankInfo rank, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options) {
  if (rank.world_size < 1 || rank.rank < 0 || rank.rank >= rank.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank.rank, " outside world size ", rank.world_size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, *store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank.rank, rank.world_size);
    ctx->setTimeout(options.timeout);
    ctx->connectFullMesh(prefixed, device);
    // connectFullMesh returns on a rank as soon as its own pairs are up, which
    // can be before a peer has finished accepting its side. A rank that then
    // closed its connections at once (its shard failed to load, say) made that
    // peer's rendezvous fail with "Connection closed by peer" instead of the
    // peer seeing its own error. A barrier over the new mesh closes that gap:
    // no rank returns before every rank has connected all of its pairs, and a
    // dissemination barrier's every send is waited for by its receiver, so no
    // message is still owed when a rank tears down afterwards.
    gloo::BarrierOptions barrier(ctx);
    gloo::barrier(barrier);
    return std::unique_ptr<Communicator>(new GlooCommunicator(rank, ctx));
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return absl::UnavailableError(
        absl::StrCat("gloo rendezvous failed for rank ", rank.rank, " of ", rank.world_size, ": ", msg));
  }
}

}  // namespace shardlm
