// The settings of `shardlm serve` and `shardlm coordinator`: one struct,
// each field bound to its flag (and config key and SHARDLM_ variable) where
// DeclareServeFlags declares it (docs/configuration.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/flags.h"
#include "common/grpc_security.h"

namespace shardlm {

// serve's and coordinator's settings, each bound to its flag where it is declared.
struct ServeFlags {
  std::string model;
  int tp = 1;
  std::string host;
  int port = 0;
  std::string worker_listen;
  EngineFlags engine;
  DeviceFlags device;
  std::string collectives;  // serve only
  int64_t target_step_ms = 0;
  SchedulingFlags scheduling;
  int32_t max_queued_requests = 0;
  int64_t max_queued_tokens = 0;
  double max_handle_share = 0;
  int64_t collective_timeout_ms = 0;
  int64_t step_timeout_ms = 0;
  int64_t step_timeout_per_token_ms = 0;
  int64_t handle_ttl_s = 0;
  bool no_prefix_caching = false;
  int64_t shutdown_grace_s = 0;
  TlsFiles tls;
  std::optional<std::string> api_key_file;
  bool no_reflection = false;
  int64_t max_message_mb = 0;
  std::optional<int> metrics_port;
  std::optional<std::string> metrics_host;
  std::optional<int> http_port;
  std::optional<std::string> http_host;
  int http_threads = 0;
  int64_t http_request_timeout_s = 0;
  int http_max_idle_connections = 0;
  std::optional<std::string> served_model_name;
  std::optional<std::string> chat_template;
  std::optional<std::string> router_model_path;
  std::optional<std::string> kv_events_endpoint;
  std::optional<std::string> kv_events_topic;
  std::optional<std::string> kv_events_replay_endpoint;
  std::optional<std::string> state_db;
  std::optional<std::string> state_dir;
  int state_runs = 0;
  InternalSecurityFlags security;
};

// serve's and coordinator's flags (they differ in --collectives, local
// workers only, and the internal security's defaults).
void DeclareServeFlags(FlagSet& f, bool spawn_local, ServeFlags* o);

}  // namespace shardlm
