// TLS files and secrets read from disk, for every server of the project: the
// gRPC endpoints (common/grpc_security.h) and the HTTP server
// (coordinator/http/http_server.h). No transport in here.
//
//   TlsFiles tls{.cert = "server.pem", .key = "server.key", .client_ca = "ca.pem"};
//   SHARDLM_ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(tls.cert, "--tls-cert"));
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace shardlm {

// PEM files. Server side: cert + key, and client_ca to require client
// certificates signed by it (mutual TLS). Client side: client_ca is the CA
// that signed the server; cert + key (optional) are this client's identity.
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string client_ca;
  bool enabled() const { return !cert.empty() || !key.empty() || !client_ca.empty(); }
};

// Reads a whole file; NotFound / InvalidArgument naming `what` (a flag).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what);

// A shared token from a file, without trailing blanks or newline.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& what);

}  // namespace shardlm
