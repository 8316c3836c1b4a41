// Memory-mapped safetensors files with a fully validated header.
//
// A safetensors file is: u64 little-endian header length N, N bytes of JSON
// ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//   "__metadata__": {..}}), then the data section. Every field is checked
// before use (see ParseSafetensorsHeader); tensors are returned as zero-copy
// views into the mapping, which lives as long as the SafetensorsFile.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
//   const TensorView* w = file->Find("model.norm.weight");
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/mapped_file.h"
#include "formats/quant_blocks.h"

namespace shardlm {

enum class DType { kF32, kF16, kBF16 };

// "F32" / "F16" / "BF16"; an unknown name is InvalidArgument listing these.
absl::StatusOr<DType> ParseSafetensorsDType(const std::string& name);
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

// One tensor inside a mapped file; `data` points into the mapping.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // nullptr for views parsed without data
  size_t nbytes = 0;
  size_t offset = 0;  // offset inside the data section
  // GGUF only: a tensor stored in ggml blocks (Q8_0, Q4_0, Q4_1) along its last
  // dimension; `dtype` is then unused. kNone for plain F32/F16/BF16 elements.
  BlockFormat block = BlockFormat::kNone;
  // GGUF llama only: q_proj/k_proj rows are in llama.cpp's rotary order
  // (each head's two halves interleaved); heads have this many rows. 0: not permuted.
  int64_t rope_permuted_head_dim = 0;

  int64_t numel() const;
};

// The parsed header. Offsets are relative to the data section.
struct SafetensorsHeader {
  std::map<std::string, TensorView> tensors;
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;  // 8 + header length
};

// Caps the JSON header; real checkpoints have headers of a few hundred KiB.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Validates and parses the whole file image `bytes[0, size)`. `label` (the
// file name) prefixes every error. Never reads outside the buffer.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                         const std::string& label);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  MappedFile map_;
  SafetensorsHeader header_;
};

// Serialises tensors into the safetensors format (used by make-tiny-model and
// tests). `data[i]` holds tensors[i].nbytes bytes.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};
absl::Status WriteSafetensors(const std::string& path, const std::vector<OwnedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace shardlm
