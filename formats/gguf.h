// GGUF files (the checkpoint format of llama.cpp), parsed and bounds-checked.
//
// Layout (little-endian, version 2 or 3):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value type, value),
//   tensor_count x (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset),
//   padding to general.alignment (default 32), then the data section.
// Strings are u64 length + bytes; arrays u32 element type + u64 count + elements.
// Dimensions are in ggml order: dims[0] is the innermost (a row's length), so a
// PyTorch [rows, cols] weight has dims {cols, rows}.
//
// ParseGguf validates every length, count, offset and size against the buffer
// before use, and never reads outside it (fuzz/gguf_fuzzer.cc checks this).
//
//   SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open("SmolLM2-135M-Instruct.Q4_1.gguf"));
//   const GgufValue* arch = file->header().Find("general.architecture");
//   for (const GgufTensorInfo& t : file->header().tensors) ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/mapped_file.h"

namespace shardlm {

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Integers and bools are in `i` (u64 values above
// INT64_MAX are refused), floats in `f`; arrays of them in `ints` / `floats` /
// `strings` by element type. Arrays of arrays are parsed past and kept empty.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType array_type = GgufValueType::kU8;  // kArray only
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;  // an integer or bool scalar
  bool is_float() const;    // an f32 / f64 scalar
};

// ggml tensor types: the ids GGUF files use.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};
// "Q4_1", ...; "type 99" for an unknown id.
std::string GgmlTypeName(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] innermost
  uint32_t type = 0;          // a GgmlType id
  uint64_t offset = 0;        // inside the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;
};

struct GgufHeader {
  uint32_t version = 0;
  uint32_t alignment = 32;
  size_t data_offset = 0;  // start of the data section in the file
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order

  // nullptr when absent.
  const GgufValue* Find(const std::string& key) const;
};

// Caps on what one file may declare (real files: ~300 tensors, ~40 keys, 150k-entry arrays).
inline constexpr uint64_t kMaxGgufTensors = 1u << 20;
inline constexpr uint64_t kMaxGgufStringBytes = 64u << 20;
inline constexpr int kMaxGgufTensorNameBytes = 256;

// Validates and parses the whole file image `bytes[0, size)`. `label` (the
// file name) starts every error.
absl::StatusOr<GgufHeader> ParseGguf(const uint8_t* bytes, size_t size, const std::string& label);

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const GgufHeader& header() const { return header_; }

 private:
  GgufFile() = default;
  std::string path_;
  MappedFile map_;
  GgufHeader header_;
};

// True when `path` is a regular file that starts with the GGUF magic.
bool IsGgufFile(const std::string& path);

}  // namespace shardlm
