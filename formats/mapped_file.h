// A read-only memory mapping of a whole file, unmapped when destroyed.
//
//   SHARDLM_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
//   Parse(file.data(), file.size());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardlm {

class MappedFile {
 public:
  // NotFound when the file cannot be opened; Internal when it cannot be mapped.
  static absl::StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;  // nullptr for an empty file
  size_t size_ = 0;
};

}  // namespace shardlm
