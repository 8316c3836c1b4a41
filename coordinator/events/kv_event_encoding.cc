#include "coordinator/events/kv_event_encoding.h"

#include <msgpack.h>

namespace shardlm {
namespace {

// msgpack-c's packer over a growing buffer, freed on scope exit.
class Packer {
 public:
  Packer() {
    msgpack_sbuffer_init(&buffer_);
    msgpack_packer_init(&packer_, &buffer_, msgpack_sbuffer_write);
  }
  ~Packer() { msgpack_sbuffer_destroy(&buffer_); }
  Packer(const Packer&) = delete;
  Packer& operator=(const Packer&) = delete;

  void Array(size_t n) { msgpack_pack_array(&packer_, n); }
  void Str(const std::string& s) {
    msgpack_pack_str(&packer_, s.size());
    msgpack_pack_str_body(&packer_, s.data(), s.size());
  }
  void U64(uint64_t v) { msgpack_pack_uint64(&packer_, v); }
  void I64(int64_t v) { msgpack_pack_int64(&packer_, v); }
  void F64(double v) { msgpack_pack_double(&packer_, v); }
  void Nil() { msgpack_pack_nil(&packer_); }
  std::string bytes() const { return std::string(buffer_.data, buffer_.size); }

 private:
  msgpack_sbuffer buffer_;
  msgpack_packer packer_;
};

void PackHashes(Packer& p, const std::vector<uint64_t>& hashes) {
  p.Array(hashes.size());
  for (uint64_t h : hashes) p.U64(h);
}

void PackEvent(Packer& p, const KvEvent& e, const KvEventFormat& format) {
  switch (e.kind) {
    case KvEvent::Kind::kStored:
      p.Array(7);
      p.Str("BlockStored");
      PackHashes(p, e.hashes);
      if (e.parent.has_value()) {
        p.U64(*e.parent);
      } else {
        p.Nil();
      }
      p.Array(e.tokens.size());
      for (int32_t t : e.tokens) p.I64(t);
      p.I64(format.block_size);
      p.Nil();  // LoRA id: shardlm serves no adapters
      p.Str(format.medium);
      return;
    case KvEvent::Kind::kRemoved:
      p.Array(3);
      p.Str("BlockRemoved");
      PackHashes(p, e.hashes);
      p.Str(format.medium);
      return;
    case KvEvent::Kind::kAllCleared:
      p.Array(1);
      p.Str("AllBlocksCleared");
      return;
  }
}

}  // namespace

std::string EncodeKvEventBatch(double timestamp_s, const std::vector<KvEvent>& events,
                               const KvEventFormat& format) {
  Packer p;
  p.Array(3);
  p.F64(timestamp_s);
  p.Array(events.size());
  for (const KvEvent& e : events) PackEvent(p, e, format);
  p.I64(format.data_parallel_rank);
  return p.bytes();
}

std::string SequenceFrame(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t v = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return out;
}

}  // namespace shardlm
