#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

// Elements per block and bytes per block of each ggml type this reader can size.
struct TypeSize {
  int64_t elements;
  int64_t bytes;
};

bool SizeOfType(uint32_t type, TypeSize* out) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kI32:
      *out = {1, 4};
      return true;
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kI16:
      *out = {1, 2};
      return true;
    case GgmlType::kI8:
      *out = {1, 1};
      return true;
    case GgmlType::kI64:
    case GgmlType::kF64:
      *out = {1, 8};
      return true;
    case GgmlType::kQ4_0:
      *out = {32, 18};
      return true;
    case GgmlType::kQ4_1:
      *out = {32, 20};
      return true;
    case GgmlType::kQ5_0:
      *out = {32, 22};
      return true;
    case GgmlType::kQ5_1:
      *out = {32, 24};
      return true;
    case GgmlType::kQ8_0:
      *out = {32, 34};
      return true;
    case GgmlType::kQ8_1:
      *out = {32, 36};
      return true;
    case GgmlType::kQ2_K:
      *out = {256, 84};
      return true;
    case GgmlType::kQ3_K:
      *out = {256, 110};
      return true;
    case GgmlType::kQ4_K:
      *out = {256, 144};
      return true;
    case GgmlType::kQ5_K:
      *out = {256, 176};
      return true;
    case GgmlType::kQ6_K:
      *out = {256, 210};
      return true;
    case GgmlType::kQ8_K:
      *out = {256, 292};
      return true;
  }
  return false;
}

// A cursor over the file image; every read checks the bytes left first.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, size_t size, const std::string& label)
      : p_(bytes), size_(size), label_(label) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("GGUF file ", label_, ": ", what));
  }

  template <typename T>
  absl::Status Read(T* out, const char* what) {
    if (left() < sizeof(T)) {
      return Bad(absl::StrCat("file ends at byte ", size_, " inside ", what));
    }
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status ReadString(std::string* out, const std::string& what, uint64_t cap) {
    uint64_t len = 0;
    if (absl::Status st = Read(&len, what.c_str()); !st.ok()) return st;
    if (len > cap) return Bad(absl::StrCat(what, " is ", len, " bytes; the limit is ", cap));
    if (len > left()) {
      return Bad(absl::StrCat(what, " is ", len, " bytes, past the end of the file (", left(), " left)"));
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

  absl::Status Skip(uint64_t n, const std::string& what) {
    if (n > left()) return Bad(absl::StrCat(what, " runs past the end of the file"));
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& label_;
};

size_t ScalarBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
      return 8;  // at least its length
    case GgufValueType::kArray:
      return 12;  // at least its element type and count
  }
  return 0;
}

bool KnownType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

template <typename T, typename Out>
absl::Status ReadAs(Cursor& c, const std::string& what, Out* out) {
  T v{};
  if (absl::Status st = c.Read(&v, what.c_str()); !st.ok()) return st;
  *out = static_cast<Out>(v);
  return absl::OkStatus();
}

// Reads one scalar of type `t` (not string or array) into `*i` or `*f`.
absl::Status ReadScalar(Cursor& c, GgufValueType t, const std::string& key, int64_t* i, double* f) {
  const std::string what = "the value of '" + key + "'";
  switch (t) {
    case GgufValueType::kU8:
      return ReadAs<uint8_t>(c, what, i);
    case GgufValueType::kI8:
      return ReadAs<int8_t>(c, what, i);
    case GgufValueType::kU16:
      return ReadAs<uint16_t>(c, what, i);
    case GgufValueType::kI16:
      return ReadAs<int16_t>(c, what, i);
    case GgufValueType::kU32:
      return ReadAs<uint32_t>(c, what, i);
    case GgufValueType::kI32:
      return ReadAs<int32_t>(c, what, i);
    case GgufValueType::kI64:
      return ReadAs<int64_t>(c, what, i);
    case GgufValueType::kF32:
      return ReadAs<float>(c, what, f);
    case GgufValueType::kF64:
      return ReadAs<double>(c, what, f);
    case GgufValueType::kBool: {
      if (absl::Status st = ReadAs<uint8_t>(c, what, i); !st.ok()) return st;
      if (*i > 1) return c.Bad(absl::StrCat(what, " is a bool stored as ", *i, " (must be 0 or 1)"));
      return absl::OkStatus();
    }
    case GgufValueType::kU64: {
      uint64_t v = 0;
      if (absl::Status st = ReadAs<uint64_t>(c, what, &v); !st.ok()) return st;
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return c.Bad(absl::StrCat(what, " (", v, ") does not fit in 63 bits"));
      }
      *i = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kString:
    case GgufValueType::kArray:
      break;
  }
  return c.Bad("internal: not a scalar type");
}

absl::Status ReadValue(Cursor& c, GgufValueType t, const std::string& key, int depth, GgufValue* out);

absl::Status ReadArray(Cursor& c, const std::string& key, int depth, GgufValue* out) {
  uint32_t elem = 0;
  uint64_t count = 0;
  if (auto st = c.Read(&elem, ("the array type of '" + key + "'").c_str()); !st.ok()) return st;
  if (!KnownType(elem)) return c.Bad(absl::StrCat("array '", key, "' has unknown element type ", elem));
  if (auto st = c.Read(&count, ("the array length of '" + key + "'").c_str()); !st.ok()) return st;
  const auto et = static_cast<GgufValueType>(elem);
  if (count > c.left() / ScalarBytes(et)) {
    return c.Bad(absl::StrCat("array '", key, "' declares ", count, " elements, more than the ", c.left(),
                              " bytes left can hold"));
  }
  out->array_type = et;
  if (et == GgufValueType::kArray) {
    if (depth >= 4) return c.Bad("array '" + key + "' nests arrays more than 4 deep");
    for (uint64_t k = 0; k < count; ++k) {
      GgufValue ignored;
      if (auto st = ReadValue(c, et, key, depth + 1, &ignored); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  if (et == GgufValueType::kString) {
    out->strings.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      if (auto st = c.ReadString(&out->strings[k], absl::StrCat("element ", k, " of '", key, "'"),
                                 kMaxGgufStringBytes);
          !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }
  const bool is_float = et == GgufValueType::kF32 || et == GgufValueType::kF64;
  (is_float ? out->floats.resize(count) : out->ints.resize(count));
  for (uint64_t k = 0; k < count; ++k) {
    int64_t i = 0;
    double f = 0;
    if (auto st = ReadScalar(c, et, key, &i, &f); !st.ok()) return st;
    if (is_float) {
      out->floats[k] = f;
    } else {
      out->ints[k] = i;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& c, GgufValueType t, const std::string& key, int depth, GgufValue* out) {
  out->type = t;
  if (t == GgufValueType::kString)
    return c.ReadString(&out->s, "the value of '" + key + "'", kMaxGgufStringBytes);
  if (t == GgufValueType::kArray) return ReadArray(c, key, depth, out);
  return ReadScalar(c, t, key, &out->i, &out->f);
}

absl::Status ReadTensorInfo(Cursor& c, uint64_t index, GgufTensorInfo* t) {
  if (auto st = c.ReadString(&t->name, absl::StrCat("the name of tensor ", index), kMaxGgufTensorNameBytes);
      !st.ok()) {
    return st;
  }
  const std::string what = "tensor '" + t->name + "'";
  uint32_t n_dims = 0;
  if (auto st = c.Read(&n_dims, (what + "'s dimension count").c_str()); !st.ok()) return st;
  if (n_dims < 1 || n_dims > 4)
    return c.Bad(absl::StrCat(what, " has ", n_dims, " dimensions (1 to 4 allowed)"));
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = 0;
    if (auto st = c.Read(&dim, (what + "'s dimensions").c_str()); !st.ok()) return st;
    if (dim == 0 || dim > (1ull << 40)) return c.Bad(absl::StrCat(what, " has dimension ", d, " = ", dim));
    t->dims.push_back(static_cast<int64_t>(dim));
  }
  if (auto st = c.Read(&t->type, (what + "'s type").c_str()); !st.ok()) return st;
  if (auto st = c.Read(&t->offset, (what + "'s offset").c_str()); !st.ok()) return st;
  TypeSize ts;
  if (!SizeOfType(t->type, &ts)) return c.Bad(absl::StrCat(what, " has unknown ggml type ", t->type));
  if (t->dims[0] % ts.elements != 0) {
    return c.Bad(absl::StrCat(what, " is ", GgmlTypeName(t->type), " but its rows of ", t->dims[0],
                              " are not a whole number of ", ts.elements, "-element blocks"));
  }
  uint64_t nbytes = static_cast<uint64_t>(t->dims[0] / ts.elements) * static_cast<uint64_t>(ts.bytes);
  for (size_t d = 1; d < t->dims.size(); ++d) {
    if (nbytes > (1ull << 48) / static_cast<uint64_t>(t->dims[d])) {
      return c.Bad(what + " is larger than 2^48 bytes");
    }
    nbytes *= static_cast<uint64_t>(t->dims[d]);
  }
  t->nbytes = nbytes;
  return absl::OkStatus();
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }

std::string GgmlTypeName(uint32_t type) {
  static const std::map<uint32_t, const char*> kNames = {
      {0, "F32"},  {1, "F16"},   {2, "Q4_0"},  {3, "Q4_1"},  {6, "Q5_0"},  {7, "Q5_1"},  {8, "Q8_0"},
      {9, "Q8_1"}, {10, "Q2_K"}, {11, "Q3_K"}, {12, "Q4_K"}, {13, "Q5_K"}, {14, "Q6_K"}, {15, "Q8_K"},
      {24, "I8"},  {25, "I16"},  {26, "I32"},  {27, "I64"},  {28, "F64"},  {30, "BF16"}};
  auto it = kNames.find(type);
  return it == kNames.end() ? absl::StrCat("type ", type) : it->second;
}

const GgufValue* GgufHeader::Find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

absl::StatusOr<GgufHeader> ParseGguf(const uint8_t* bytes, size_t size, const std::string& label) {
  Cursor c(bytes, size, label);
  GgufHeader h;
  uint32_t magic = 0;
  if (auto st = c.Read(&magic, "the magic"); !st.ok()) return st;
  if (std::memcmp(bytes, "GGUF", 4) != 0) return c.Bad("does not start with the magic 'GGUF'");
  if (auto st = c.Read(&h.version, "the version"); !st.ok()) return st;
  if (h.version == 0x02000000 || h.version == 0x03000000) {
    return c.Bad("is a big-endian GGUF; only little-endian files are supported");
  }
  if (h.version != 2 && h.version != 3) {
    return c.Bad(absl::StrCat("has version ", h.version, "; versions 2 and 3 are supported"));
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (auto st = c.Read(&n_tensors, "the tensor count"); !st.ok()) return st;
  if (auto st = c.Read(&n_kv, "the metadata count"); !st.ok()) return st;
  if (n_tensors > kMaxGgufTensors || n_tensors > c.left() / 24) {
    return c.Bad(absl::StrCat("declares ", n_tensors, " tensors, more than the file can hold"));
  }
  if (n_kv > c.left() / 12)
    return c.Bad(absl::StrCat("declares ", n_kv, " metadata keys, more than the file can hold"));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    if (auto st = c.ReadString(&key, absl::StrCat("metadata key ", k), 1 << 16); !st.ok()) return st;
    uint32_t type = 0;
    if (auto st = c.Read(&type, ("the type of '" + key + "'").c_str()); !st.ok()) return st;
    if (!KnownType(type)) return c.Bad(absl::StrCat("metadata '", key, "' has unknown value type ", type));
    GgufValue value;
    if (auto st = ReadValue(c, static_cast<GgufValueType>(type), key, 0, &value); !st.ok()) return st;
    if (!h.metadata.emplace(key, std::move(value)).second)
      return c.Bad("metadata key '" + key + "' appears twice");
  }
  if (const GgufValue* a = h.Find("general.alignment")) {
    if (a->type != GgufValueType::kU32 || a->i == 0 || (a->i & (a->i - 1)) != 0) {
      return c.Bad("general.alignment must be a u32 power of two");
    }
    h.alignment = static_cast<uint32_t>(a->i);
  }
  h.tensors.resize(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    if (auto st = ReadTensorInfo(c, k, &h.tensors[k]); !st.ok()) return st;
  }
  const uint64_t data_offset = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
  if (n_tensors > 0 && data_offset > size) return c.Bad("the data section starts past the end of the file");
  h.data_offset = static_cast<size_t>(std::min<uint64_t>(data_offset, size));
  const uint64_t data_size = size - h.data_offset;
  std::map<std::string, size_t> seen;
  for (GgufTensorInfo& t : h.tensors) {
    if (!seen.emplace(t.name, 0).second) return c.Bad("tensor '" + t.name + "' appears twice");
    if (t.offset % h.alignment != 0) {
      return c.Bad(absl::StrCat("tensor '", t.name, "' starts at offset ", t.offset,
                                ", not a multiple of the ", h.alignment, "-byte alignment"));
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return c.Bad(absl::StrCat("tensor '", t.name, "' (", t.nbytes, " bytes at offset ", t.offset,
                                ") runs past the end of the data section (", data_size, " bytes)"));
    }
    t.data = bytes + h.data_offset + t.offset;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    if (by_offset[k - 1]->offset + by_offset[k - 1]->nbytes > by_offset[k]->offset) {
      return c.Bad("tensors '" + by_offset[k - 1]->name + "' and '" + by_offset[k]->name + "' overlap");
    }
  }
  return h;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->map_ = std::move(*mapped);
  auto header = ParseGguf(file->map_.data(), file->map_.size(), path);
  if (!header.ok()) return header.status();
  file->header_ = std::move(*header);
  return file;
}

bool IsGgufFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace shardlm
