#include "collectives/shm_communicator.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gloo/rendezvous/store.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"

namespace shardlm {
namespace {

constexpr int kMaxWorld = 64;
constexpr int kSpins = 20000;  // ~tens of microseconds before sleeping on the futex
constexpr auto kLivenessPeriod = std::chrono::milliseconds(10);

// The segment: this header, then two buffers of world x slot_bytes (op n
// uses buffer n % 2). A rank can be at most one op ahead of the slowest (it
// waits for everyone at each op), so the buffer it writes next was read by
// everyone before they arrived at the op in between.
struct Header {
  uint64_t nonce;
  int32_t world;
  int64_t slot_bytes;
  alignas(64) std::atomic<uint32_t> arrivals;  // every rank's arrivals, summed
  alignas(64) std::atomic<uint32_t> sleepers;  // ranks waiting on the arrivals futex
  struct alignas(64) Rank {
    std::atomic<uint32_t> op;  // the last op this rank arrived at
  } ranks[kMaxWorld];
};
constexpr int64_t kDataOffset = (sizeof(Header) + 4095) / 4096 * 4096;

int64_t SegmentBytes(int world, int64_t slot_bytes) { return kDataOffset + 2 * world * slot_bytes; }

// Leading dims, the split dim and trailing dims of a contiguous tensor, for
// [outer, size, inner] copies along `dim`.
struct Split {
  int64_t outer = 1, size = 1, inner = 1, dim = 0;
};
Split SplitAt(const at::Tensor& t, int64_t dim) {
  Split s;
  s.dim = dim < 0 ? dim + t.dim() : dim;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i < s.dim) s.outer *= t.size(i);
    if (i == s.dim) s.size = t.size(i);
    if (i > s.dim) s.inner *= t.size(i);
  }
  return s;
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(RankInfo rank, std::unique_ptr<Communicator> fallback, int fd, void* base, int64_t bytes,
                  std::chrono::milliseconds timeout)
      : rank_(rank),
        fallback_(std::move(fallback)),
        fd_(fd),
        base_(base),
        bytes_(bytes),
        header_(static_cast<Header*>(base)),
        data_(static_cast<char*>(base) + kDataOffset),
        slot_bytes_(header_->slot_bytes),
        timeout_(timeout) {}
  ~ShmCommunicator() override {
    munmap(base_, bytes_);
    close(fd_);
  }

  RankInfo rank_info() const override { return rank_; }

  absl::StatusOr<at::Tensor> AllGather(const at::Tensor& shard, int64_t dim) override {
    return GatherTo(shard, dim, /*root=*/-1);
  }

  absl::StatusOr<at::Tensor> Gather(const at::Tensor& shard, int64_t dim, int root) override {
    if (root < 0 || root >= rank_.world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("gather root ", root, " outside world size ", rank_.world_size));
    }
    return GatherTo(shard, dim, root);
  }

  absl::StatusOr<at::Tensor> ReduceScatter(const at::Tensor& partial, int64_t dim) override {
    const int n = rank_.world_size;
    at::Tensor src = partial.contiguous();
    const Split sp = SplitAt(src, dim);
    if (sp.size % n != 0) {
      return absl::InvalidArgumentError(absl::StrCat("reduce-scatter: dimension ", sp.dim, " of size ",
                                                     sp.size, " does not divide by world size ", n));
    }
    const int64_t row_bytes = sp.size * sp.inner * src.element_size();
    const bool supported = src.scalar_type() == at::kFloat || src.scalar_type() == at::kBFloat16;
    if (!supported || row_bytes > slot_bytes_) return fallback_->ReduceScatter(partial, dim);
    const int64_t part = sp.size / n;
    std::vector<int64_t> out_shape(src.sizes().begin(), src.sizes().end());
    out_shape[sp.dim] = part;
    at::Tensor out = at::empty(out_shape, src.options());
    // Sum this rank's columns over every rank's slot, in rank order, in f32.
    const int64_t cols = part * sp.inner, first = rank_.rank * part * sp.inner, width = sp.size * sp.inner;
    absl::Status st =
        Rounds(src, sp.outer, row_bytes, "reduce-scatter", [&](uint32_t op, int64_t o0, int64_t rows) {
          if (src.scalar_type() == at::kFloat) {
            Reduce<float>(op, rows, cols, first, width, out.data_ptr<float>() + o0 * cols);
          } else {
            Reduce<c10::BFloat16>(op, rows, cols, first, width, out.data_ptr<c10::BFloat16>() + o0 * cols);
          }
        });
    if (!st.ok()) return st;
    return out;
  }

  absl::Status AllReduce(at::Tensor& tensor) override { return fallback_->AllReduce(tensor); }
  absl::Status Broadcast(at::Tensor& tensor, int root) override { return fallback_->Broadcast(tensor, root); }
  absl::Status Barrier() override { return fallback_->Barrier(); }

 private:
  char* Slot(uint32_t op, int rank) const {
    return data_ + ((op & 1u) * rank_.world_size + rank) * slot_bytes_;
  }

  template <typename T>
  void Reduce(uint32_t op, int64_t rows, int64_t cols, int64_t first, int64_t width, T* out) const {
    std::vector<const T*> slots(rank_.world_size);
    for (int r = 0; r < rank_.world_size; ++r) slots[r] = reinterpret_cast<const T*>(Slot(op, r));
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t c = 0; c < cols; ++c) {
        float s = 0.0f;
        for (const T* p : slots) s += static_cast<float>(p[o * width + first + c]);
        out[o * cols + c] = static_cast<T>(s);
      }
    }
  }

  // All-gather (root < 0) or gather to root: [outer, size, inner] per rank ->
  // [outer, n * size, inner].
  absl::StatusOr<at::Tensor> GatherTo(const at::Tensor& shard, int64_t dim, int root) {
    const int n = rank_.world_size;
    at::Tensor src = shard.contiguous();
    const Split sp = SplitAt(src, dim);
    const int64_t row_bytes = sp.size * sp.inner * src.element_size();
    if (row_bytes > slot_bytes_ || row_bytes == 0) {
      return root < 0 ? fallback_->AllGather(shard, dim) : fallback_->Gather(shard, dim, root);
    }
    const bool keep = root < 0 || root == rank_.rank;
    at::Tensor out;
    if (keep) {
      std::vector<int64_t> shape(src.sizes().begin(), src.sizes().end());
      shape[sp.dim] = sp.size * n;
      out = at::empty(shape, src.options());
    }
    absl::Status st =
        Rounds(src, sp.outer, row_bytes, root < 0 ? "all-gather" : "gather",
               [&](uint32_t op, int64_t o0, int64_t rows) {
                 if (!keep) return;
                 char* dst = static_cast<char*>(out.data_ptr());
                 for (int r = 0; r < n; ++r) {
                   const char* from = Slot(op, r);
                   for (int64_t o = 0; o < rows; ++o) {
                     std::memcpy(dst + ((o0 + o) * n + r) * row_bytes, from + o * row_bytes, row_bytes);
                   }
                 }
               });
    if (!st.ok()) return st;
    return keep ? absl::StatusOr<at::Tensor>(out) : absl::StatusOr<at::Tensor>(at::Tensor());
  }

  // Moves `outer` rows of `row_bytes` each through the slots, as many per op
  // as a slot holds: this rank's rows go into its slot, every rank arrives,
  // then read(op, first_row, rows) takes what it needs from all slots.
  template <typename Read>
  absl::Status Rounds(const at::Tensor& src, int64_t outer, int64_t row_bytes, const char* what, Read read) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t rows_per_op = slot_bytes_ / row_bytes;
    for (int64_t o0 = 0; o0 < outer; o0 += rows_per_op) {
      const int64_t rows = std::min(rows_per_op, outer - o0);
      const uint32_t op = ++op_;
      std::memcpy(Slot(op, rank_.rank), static_cast<const char*>(src.data_ptr()) + o0 * row_bytes,
                  rows * row_bytes);
      absl::Status st = Exchange(op, what);
      if (!st.ok()) return st;
      read(op, o0, rows);
    }
    return absl::OkStatus();
  }

  // Announces this rank's slot for `op` and waits until every rank has.
  absl::Status Exchange(uint32_t op, const char* what) {
    if (!broken_.ok()) return broken_;
    const int n = rank_.world_size;
    header_->ranks[rank_.rank].op.store(op, std::memory_order_release);
    header_->arrivals.fetch_add(1, std::memory_order_seq_cst);
    if (header_->sleepers.load(std::memory_order_seq_cst) > 0) Wake();
    const uint32_t target = op * static_cast<uint32_t>(n);
    auto done = [&](uint32_t arrivals) { return static_cast<int32_t>(arrivals - target) >= 0; };
    for (int i = 0; i < kSpins; ++i) {
      if (done(header_->arrivals.load(std::memory_order_acquire))) return absl::OkStatus();
      __builtin_ia32_pause();
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = header_->arrivals.load(std::memory_order_seq_cst);
      if (!done(seen)) Sleep(seen);
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (done(header_->arrivals.load(std::memory_order_acquire))) return absl::OkStatus();
      // Who is missing, and are they still alive?
      std::vector<int> missing, gone;
      for (int r = 0; r < n; ++r) {
        if (static_cast<int32_t>(header_->ranks[r].op.load(std::memory_order_acquire) - op) >= 0) continue;
        missing.push_back(r);
        if (!Alive(r)) gone.push_back(r);
      }
      if (!gone.empty()) {
        broken_ = absl::UnavailableError(absl::StrCat("shm ", what, " failed on rank ", rank_.rank, " of ", n,
                                                      ": rank ", absl::StrJoin(gone, ", "), " exited"));
        return broken_;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        broken_ = absl::DeadlineExceededError(
            absl::StrCat("shm ", what, " failed on rank ", rank_.rank, " of ", n, ": timed out after ",
                         timeout_.count(), " ms waiting for rank ", absl::StrJoin(missing, ", ")));
        return broken_;
      }
    }
  }

  void Sleep(uint32_t seen) {
    timespec ts{0, std::chrono::duration_cast<std::chrono::nanoseconds>(kLivenessPeriod).count()};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->arrivals), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  void Wake() {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&header_->arrivals), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
  }

  // A rank holds a write lock on byte `rank` of the segment while it lives.
  bool Alive(int rank) const {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = rank;
    fl.l_len = 1;
    if (fcntl(fd_, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: leave it to the timeout
    return fl.l_type != F_UNLCK;
  }

  RankInfo rank_;
  std::unique_ptr<Communicator> fallback_;
  int fd_;
  void* base_;
  int64_t bytes_;
  Header* header_;
  char* data_;
  int64_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  uint32_t op_ = 0;
  absl::Status broken_;
};

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

bool LockOwnByte(int fd, int rank) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = rank;
  fl.l_len = 1;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

}  // namespace

bool IsSharedMemory(const Communicator& comm) {
  return dynamic_cast<const ShmCommunicator*>(&comm) != nullptr;
}

std::unique_ptr<Communicator> MaybeUseSharedMemory(RankInfo rank, gloo::rendezvous::Store& store,
                                                   std::unique_ptr<Communicator> fallback,
                                                   const ShmOptions& options) {
  if (rank.world_size < 2 || rank.world_size > kMaxWorld) return fallback;
  const std::string key = options.prefix + "/shm/";
  const int64_t bytes = SegmentBytes(rank.world_size, options.slot_bytes);
  int fd = -1;
  void* base = MAP_FAILED;
  std::string name, why;
  try {
    if (rank.rank == 0) {
      std::random_device rd;
      const uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
      name = absl::StrCat("/shardlm-", getpid(), "-", nonce);
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0 && ftruncate(fd, bytes) == 0) {
        base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      if (base != MAP_FAILED) {
        auto* h = new (base) Header();
        h->nonce = nonce;
        h->world = rank.world_size;
        h->slot_bytes = options.slot_bytes;
        store.set(key + "name", Bytes(name));
      } else {
        why = absl::StrCat("cannot create ", name, ": ", std::strerror(errno));
        store.set(key + "name", Bytes(""));
      }
    } else {
      store.wait({key + "name"});
      std::vector<char> got = store.get(key + "name");
      name.assign(got.begin(), got.end());
      if (!name.empty()) fd = shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size == bytes) {
        base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      // The name ends in rank 0's nonce; a segment that does not hold it is not this group's.
      if (base != MAP_FAILED &&
          std::to_string(static_cast<Header*>(base)->nonce) != name.substr(name.rfind('-') + 1)) {
        munmap(base, bytes);
        base = MAP_FAILED;
      }
      if (base == MAP_FAILED) {
        why = name.empty() ? "rank 0 made no segment"
                           : absl::StrCat("cannot map ", name, " (",
                                          fd < 0 ? std::strerror(errno) : "size differs", ")");
      }
    }
    const bool mine_ok = base != MAP_FAILED && LockOwnByte(fd, rank.rank);
    store.set(key + "ok/" + std::to_string(rank.rank), Bytes(mine_ok ? "1" : "0"));
    bool all_ok = true;
    for (int r = 0; r < rank.world_size; ++r) {
      store.wait({key + "ok/" + std::to_string(r)});
      std::vector<char> v = store.get(key + "ok/" + std::to_string(r));
      all_ok = all_ok && v.size() == 1 && v[0] == '1';
    }
    if (rank.rank == 0 && !name.empty()) shm_unlink(name.c_str());  // every rank has it open (or gave up)
    if (all_ok) {
      return std::make_unique<ShmCommunicator>(rank, std::move(fallback), fd, base, bytes, options.timeout);
    }
    if (why.empty()) why = "another rank could not map the segment";
  } catch (const std::exception& e) {
    why = e.what();
    if (rank.rank == 0 && !name.empty()) shm_unlink(name.c_str());
  }
  if (base != MAP_FAILED) munmap(base, bytes);
  if (fd >= 0) close(fd);
  LOG(INFO) << "rank " << rank.rank << ": collectives over Gloo, not shared memory (" << why << ")";
  return fallback;
}

}  // namespace shardlm
