// Transport security and peer authentication for every gRPC endpoint: the
// public API, the coordinator's worker endpoint and each worker's service.
//
//   TlsFiles tls{.cert = "server.pem", .key = "server.key", .client_ca = "ca.pem"};
//   SHARDLM_ASSIGN_OR_RETURN(auto creds, ServerCredentials(tls, "--tls", "--tls-client-ca"));
//   builder.AddListeningPort(addr, creds, &port);
//
// Plaintext is the default only on loopback-style local use; `coordinator`
// and `worker` refuse an unauthenticated internal channel unless told
// --insecure-internal (see docs/security.md).
#pragma once

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/tls_files.h"

namespace shardlm {

// Insecure credentials when `tls` is empty; errors name `flag_prefix`-cert,
// `flag_prefix`-key and `ca_flag`.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(const TlsFiles& tls,
                                                                           const std::string& flag_prefix,
                                                                           const std::string& ca_flag);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(const TlsFiles& tls,
                                                                             const std::string& flag_prefix,
                                                                             const std::string& ca_flag);

// Channel arguments every internal and client channel uses: message size
// limits and keepalive pings, so a peer that vanished without a FIN (a
// powered-off host, a cut link) is noticed within seconds.
grpc::ChannelArguments InternalChannelArguments();

// Metadata key of the internal shared token.
inline constexpr char kInternalTokenHeader[] = "x-shardlm-internal-token";

// True when `ctx` carries `token` (constant-time compare); always true when
// the token is empty (no token configured).
bool HasInternalToken(const grpc::ServerContext& ctx, const std::string& token);
// Adds the token to an outgoing call (nothing when empty).
void AttachInternalToken(grpc::ClientContext& ctx, const std::string& token);
// The PERMISSION_DENIED every internal handler returns to a caller without the token.
grpc::Status InternalTokenDenied();

}  // namespace shardlm
