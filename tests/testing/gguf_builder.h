// Writes GGUF files byte by byte for tests: well-formed ones, and broken ones
// by editing the bytes Build() returns.
//
//   GgufBuilder b;
//   b.String("general.architecture", "llama").U32("llama.block_count", 2);
//   b.Tensor("output_norm.weight", {8}, GgmlType::kF32, std::string(32, '\0'));
//   std::string bytes = b.Build();
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace shardlm::testing {

class GgufBuilder {
 public:
  GgufBuilder& String(const std::string& key, const std::string& v) {
    Key(key, GgufValueType::kString);
    Str(&kv_, v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& U32(const std::string& key, uint32_t v) { return Scalar(key, GgufValueType::kU32, v); }
  GgufBuilder& F32(const std::string& key, float v) { return Scalar(key, GgufValueType::kF32, v); }
  GgufBuilder& Bool(const std::string& key, bool v) { return Scalar(key, GgufValueType::kBool, uint8_t{v}); }
  GgufBuilder& Strings(const std::string& key, const std::vector<std::string>& v) {
    Key(key, GgufValueType::kArray);
    Put(&kv_, static_cast<uint32_t>(GgufValueType::kString));
    Put(&kv_, static_cast<uint64_t>(v.size()));
    for (const std::string& s : v) Str(&kv_, s);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& I32s(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, GgufValueType::kArray);
    Put(&kv_, static_cast<uint32_t>(GgufValueType::kI32));
    Put(&kv_, static_cast<uint64_t>(v.size()));
    for (int32_t x : v) Put(&kv_, x);
    ++n_kv_;
    return *this;
  }
  // `dims` in ggml order (innermost first); `data` is padded to the alignment.
  GgufBuilder& Tensor(const std::string& name, const std::vector<uint64_t>& dims, GgmlType type,
                      const std::string& data) {
    Str(&infos_, name);
    Put(&infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Put(&infos_, d);
    Put(&infos_, static_cast<uint32_t>(type));
    Put(&infos_, static_cast<uint64_t>(data_.size()));
    data_ += data;
    data_.append((alignment_ - data_.size() % alignment_) % alignment_, '\0');
    ++n_tensors_;
    return *this;
  }
  // f32 values as a tensor's bytes.
  static std::string F32Bytes(const std::vector<float>& v) {
    std::string out(v.size() * 4, '\0');
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }

  std::string Build() const {
    std::string out = "GGUF";
    Put(&out, uint32_t{3});
    Put(&out, n_tensors_);
    Put(&out, n_kv_);
    out += kv_;
    out += infos_;
    if (n_tensors_ > 0) out.append((alignment_ - out.size() % alignment_) % alignment_, '\0');
    return out + data_;
  }

 private:
  template <typename T>
  static void Put(std::string* out, T v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  static void Str(std::string* out, const std::string& s) {
    Put(out, static_cast<uint64_t>(s.size()));
    *out += s;
  }
  void Key(const std::string& key, GgufValueType type) {
    Str(&kv_, key);
    Put(&kv_, static_cast<uint32_t>(type));
  }
  template <typename T>
  GgufBuilder& Scalar(const std::string& key, GgufValueType type, T v) {
    Key(key, type);
    Put(&kv_, v);
    ++n_kv_;
    return *this;
  }

  uint64_t n_kv_ = 0, n_tensors_ = 0;
  uint64_t alignment_ = 32;
  std::string kv_, infos_, data_;
};

}  // namespace shardlm::testing
