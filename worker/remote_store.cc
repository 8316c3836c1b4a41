#include "worker/remote_store.h"

#include <grpcpp/grpcpp.h>

#include <stdexcept>

#include "common/grpc_security.h"

namespace shardlm {

namespace wpb = ::shardlm::worker::v1;

void RemoteStore::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext ctx;
  AttachInternalToken(ctx, token_);
  ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  wpb::StoreSetRequest req;
  req.set_key(prefix_ + key);
  req.set_value(std::string(data.begin(), data.end()));
  wpb::StoreSetResponse resp;
  grpc::Status st = stub_->StoreSet(&ctx, req, &resp);
  if (!st.ok()) throw std::runtime_error("store set '" + key + "': " + st.error_message());
}

std::vector<char> RemoteStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  AttachInternalToken(ctx, token_);
  ctx.set_deadline(std::chrono::system_clock::now() + timeout + std::chrono::seconds(5));
  wpb::StoreGetRequest req;
  req.set_key(prefix_ + key);
  req.set_timeout_ms(timeout.count());
  wpb::StoreGetResponse resp;
  grpc::Status st = stub_->StoreGet(&ctx, req, &resp);
  if (!st.ok()) throw std::runtime_error("store get '" + key + "': " + st.error_message());
  return std::vector<char>(resp.value().begin(), resp.value().end());
}

std::vector<char> RemoteStore::get(const std::string& key) { return Get(key, timeout_); }

void RemoteStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) Get(key, timeout);
}

}  // namespace shardlm
