#include "common/grpc_security.h"

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"

namespace shardlm {

namespace {

// The PEM certificate and key of `tls` (both given, or an error naming the flags).
absl::StatusOr<std::pair<std::string, std::string>> ReadCertAndKey(const TlsFiles& tls,
                                                                   const std::string& flag_prefix) {
  if (tls.cert.empty() || tls.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag_prefix, "-cert and ", flag_prefix, "-key go together (TLS needs both)"));
  }
  auto cert = ReadSecretFile(tls.cert, flag_prefix + "-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadSecretFile(tls.key, flag_prefix + "-key");
  if (!key.ok()) return key.status();
  return std::make_pair(*cert, *key);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls,
                                                                           const std::string& flag_prefix,
                                                                           const std::string& ca_flag) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  auto pair = ReadCertAndKey(tls, flag_prefix);
  if (!pair.ok()) return pair.status();
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  opts.pem_key_cert_pairs.push_back({pair->second, pair->first});
  if (!tls.client_ca.empty()) {
    auto ca = ReadSecretFile(tls.client_ca, ca_flag);
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
    opts.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(opts);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& tls,
                                                                             const std::string& flag_prefix,
                                                                             const std::string& ca_flag) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions opts;
  if (!tls.client_ca.empty()) {
    auto ca = ReadSecretFile(tls.client_ca, ca_flag);
    if (!ca.ok()) return ca.status();
    opts.pem_root_certs = *ca;
  }
  if (!tls.cert.empty() || !tls.key.empty()) {
    auto pair = ReadCertAndKey(tls, flag_prefix);
    if (!pair.ok()) return pair.status();
    opts.pem_cert_chain = pair->first;
    opts.pem_private_key = pair->second;
  }
  return grpc::SslCredentials(opts);
}

grpc::ChannelArguments InternalChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return args;
}

bool HasInternalToken(const grpc::ServerContext& ctx, const std::string& token) {
  if (token.empty()) return true;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kInternalTokenHeader);
  if (it == md.end()) return false;
  const grpc::string_ref& got = it->second;
  if (got.size() != token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(got.data()[i] ^ token[i]);
  return diff == 0;
}

void AttachInternalToken(grpc::ClientContext& ctx, const std::string& token) {
  if (!token.empty()) ctx.AddMetadata(kInternalTokenHeader, token);
}

grpc::Status InternalTokenDenied() {
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "not a member of this tensor-parallel group (missing or wrong internal token)");
}

}  // namespace shardlm
