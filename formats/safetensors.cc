#include "formats/safetensors.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& label, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file ", label, ": ", what));
}

// Parses one tensor entry; `data_size` bounds the offsets.
absl::Status ParseEntry(const std::string& label, const std::string& name, const json& entry,
                        size_t data_size, TensorView* out) {
  auto bad = [&](const std::string& what) { return Bad(label, "tensor '" + name + "': " + what); };
  if (!entry.is_object()) return bad("entry is not a JSON object");
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return bad("missing string 'dtype'");
  if (shape_it == entry.end() || !shape_it->is_array()) return bad("missing array 'shape'");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return bad("'data_offsets' must be an array [begin, end]");
  }
  auto dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
  if (!dtype.ok()) return bad(std::string(dtype.status().message()));
  out->name = name;
  out->dtype = *dtype;
  if (shape_it->size() > 8) return bad("shape has more than 8 dimensions");
  uint64_t numel = 1;
  for (const json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) return bad("shape entries must be non-negative integers");
    uint64_t d = dim.get<uint64_t>();
    if (d > (1ull << 40) || (d != 0 && numel > (1ull << 40) / d)) return bad("shape is too large");
    numel *= d;
    out->shape.push_back(static_cast<int64_t>(d));
  }
  for (const json& off : *offsets_it) {
    if (!off.is_number_unsigned()) return bad("data_offsets must be non-negative integers");
  }
  uint64_t begin = (*offsets_it)[0].get<uint64_t>();
  uint64_t end = (*offsets_it)[1].get<uint64_t>();
  if (begin > end) return bad(absl::StrCat("data_offsets begin ", begin, " > end ", end));
  if (end > data_size) {
    return bad(absl::StrCat("data_offsets end ", end, " is past the data section (", data_size, " bytes)"));
  }
  uint64_t expected = numel * DTypeSize(*dtype);
  if (end - begin != expected) {
    return bad(absl::StrCat("byte size ", end - begin, " != product(shape) x dtype size = ", expected));
  }
  out->offset = begin;
  out->nbytes = end - begin;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> ParseSafetensorsDType(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return absl::InvalidArgumentError("dtype '" + name + "' is not supported (supported: F32, F16, BF16)");
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                         const std::string& label) {
  if (size < 8)
    return Bad(label, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return Bad(label,
               absl::StrCat("header length ", header_len, " exceeds the cap of ", kMaxHeaderBytes, " bytes"));
  }
  if (header_len > size - 8) {
    return Bad(label,
               absl::StrCat("header length ", header_len, " exceeds the file size (", size, " bytes)"));
  }
  json root = json::parse(bytes + 8, bytes + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad(label, "header is not well-formed JSON");
  if (!root.is_object()) return Bad(label, "header is not a JSON object");

  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  size_t data_size = size - header.data_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return Bad(label, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(label, "__metadata__ value for '" + m.key() + "' is not a string");
        }
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    TensorView view;
    absl::Status st = ParseEntry(label, it.key(), it.value(), data_size, &view);
    if (!st.ok()) return st;
    view.data = bytes + header.data_offset + view.offset;
    header.tensors.emplace(it.key(), std::move(view));
  }
  // No two tensors may share bytes.
  std::vector<const TensorView*> by_offset;
  for (const auto& [name, view] : header.tensors) {
    if (view.nbytes > 0) by_offset.push_back(&view);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView* prev = by_offset[i - 1];
    if (prev->offset + prev->nbytes > by_offset[i]->offset) {
      return Bad(label, "tensors '" + prev->name + "' and '" + by_offset[i]->name + "' overlap");
    }
  }
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_ = std::move(*mapped);
  auto header = ParseSafetensorsHeader(file->map_.data(), file->map_.size(), path);
  if (!header.ok()) return header.status();
  file->header_ = std::move(*header);
  return file;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = header_.tensors.find(name);
  return it == header_.tensors.end() ? nullptr : &it->second;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<OwnedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const OwnedTensor& t : tensors) {
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError("cannot write " + path);
  uint64_t len = text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const OwnedTensor& t : tensors) {
    out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  }
  if (!out) return absl::InternalError("short write to " + path);
  return absl::OkStatus();
}

}  // namespace shardlm
