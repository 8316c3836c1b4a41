#include "proto/checked_requests.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace shardlm {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

constexpr int kMaxDepth = 32;

// Walks the wire bytes of a `desc` message; on the first string field that
// is not UTF-8 sets *bad to its path and returns true. Malformed bytes end
// the walk quietly: the parse that follows reports them.
bool FindBadString(const uint8_t* data, int size, const Descriptor* desc, const std::string& path, int depth,
                   std::string* bad) {
  if (depth > kMaxDepth) return false;
  google::protobuf::io::CodedInputStream in(data, size);
  std::map<int, int> seen;  // occurrences per field number: the index of a repeated field
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) return false;
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* field = desc->FindFieldByNumber(number);
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED ||
        field == nullptr ||
        (field->type() != FieldDescriptor::TYPE_STRING && field->type() != FieldDescriptor::TYPE_MESSAGE)) {
      if (!WireFormatLite::SkipField(&in, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return false;
    const int index = seen[number]++;
    std::string name = path.empty() ? field->name() : path + "." + field->name();
    if (field->is_repeated()) name += "[" + std::to_string(index) + "]";
    const void* ptr = nullptr;
    int avail = 0;
    if (!in.GetDirectBufferPointer(&ptr, &avail) || avail < static_cast<int>(length)) return false;
    const auto* bytes = static_cast<const uint8_t*>(ptr);
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!google::protobuf::internal::IsStructurallyValidUTF8(reinterpret_cast<const char*>(bytes),
                                                               static_cast<int>(length))) {
        *bad = name;
        return true;
      }
    } else if (FindBadString(bytes, static_cast<int>(length), field->message_type(), name, depth + 1, bad)) {
      return true;
    }
    in.Skip(static_cast<int>(length));
  }
}

}  // namespace

grpc::Status DeserializeChecked(grpc::ByteBuffer* buffer, google::protobuf::Message* msg) {
  if (buffer == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, "no payload");
  std::vector<grpc::Slice> slices;
  // An empty buffer: no request message arrived, which a client does only
  // when it cancels before sending it.
  if (!buffer->Valid() || !buffer->Dump(&slices).ok()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "no request arrived: the client cancelled before sending it");
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  buffer->Clear();
  std::string bad;
  if (FindBadString(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()),
                    msg->GetDescriptor(), "", 0, &bad)) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        bad + " is not valid UTF-8 (string fields must be UTF-8; send token ids for raw bytes)");
  }
  if (!msg->ParseFromString(bytes)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request is not a valid " + msg->GetDescriptor()->full_name() + " message");
  }
  return grpc::Status::OK;
}

namespace {

// Failures DeserializeDeferred kept, by message address (a request message
// lives in its call's arena until the call ends; its handler takes the entry
// as it starts).
std::mutex& DeferredMutex() {
  static std::mutex mu;
  return mu;
}
std::map<const google::protobuf::Message*, grpc::Status>& Deferred() {
  static auto* failures = new std::map<const google::protobuf::Message*, grpc::Status>();
  return *failures;
}

}  // namespace

grpc::Status DeserializeDeferred(grpc::ByteBuffer* buffer, google::protobuf::Message* msg) {
  grpc::Status st = DeserializeChecked(buffer, msg);
  std::lock_guard<std::mutex> lock(DeferredMutex());
  if (st.ok()) {
    // A call whose handler never ran cannot leave its failure to the next
    // message parsed at the same address.
    Deferred().erase(msg);
  } else {
    msg->Clear();
    Deferred()[msg] = st;
  }
  return grpc::Status::OK;
}

grpc::Status TakeParseError(const google::protobuf::Message* msg) {
  std::lock_guard<std::mutex> lock(DeferredMutex());
  auto it = Deferred().find(msg);
  if (it == Deferred().end()) return grpc::Status::OK;
  grpc::Status st = it->second;
  Deferred().erase(it);
  return st;
}

}  // namespace shardlm
