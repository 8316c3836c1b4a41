// `shardlm serve` (coordinator + N local workers) and `shardlm coordinator`
// (workers join from elsewhere, e.g. a Kubernetes StatefulSet).
#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "chat/chat_template.h"
#include "chat/fill_in_middle.h"
#include "cli/commands.h"
#include "cli/draft_model.h"
#include "cli/flags.h"
#include "cli/serve_flags.h"
#include "cli/serve_ollama.h"
#include "cli/serve_state.h"
#include "common/grpc_security.h"
#include "common/health_service.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/engine/service_metrics.h"
#include "coordinator/events/kv_event_publisher.h"
#include "coordinator/group/worker_group.h"
#include "coordinator/grpc/inference_service.h"
#include "coordinator/http/metrics_http.h"
#include "coordinator/openai/openai_http.h"
#include "coordinator/router/vllm_engine_service.h"
#include "coordinator/serving/engine_loop.h"
#include "coordinator/serving/serving_core.h"
#include "coordinator/stateful/stateful_api.h"
#include "formats/model_config.h"
#include "formats/model_files.h"
#include "model/device.h"
#include "partitioning/shard_plan.h"

namespace shardlm {
namespace {

// Binds host:port once, without SO_REUSEPORT, so that a port another process
// holds is an error (with the system's reason) before any worker loads.
absl::Status CheckPortFree(const std::string& host, int64_t port) {
  if (port == 0) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string h = host == "[::]" ? "::" : host;
  if (int rc = getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--host '", host, "': ", gai_strerror(rc)));
  }
  absl::Status st;
  for (addrinfo* a = res; a != nullptr && st.ok(); a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // TIME_WAIT is not "in use"
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      st = absl::UnavailableError(
          absl::StrCat("cannot listen on ", host, ":", port, ": ", std::strerror(errno)));
    }
    close(fd);
  }
  freeaddrinfo(res);
  return st;
}

// Linking gRPC's reflection library registers its plugin with every
// ServerBuilder; this option takes it out again (--no-reflection).
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const auto& p) { return p->name() == "proto_server_reflection"; }),
                   plugins->end());
  }
};

absl::StatusOr<std::vector<std::string>> ReadApiKeys(const std::string& path) {
  auto text = ReadSecretFile(path, "--api-key-file");
  if (!text.ok()) return text.status();
  std::vector<std::string> keys;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    keys.push_back(line.substr(start));
  }
  if (keys.empty()) return absl::InvalidArgumentError("--api-key-file '" + path + "' holds no key");
  return keys;
}

// --chat-template FILE: the file's template with the model's special tokens
// (bos_token, eos_token, ...) from its tokenizer_config.json, when it has one.
absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplateFromFile(const std::string& path,
                                                                   const std::string& model_dir) {
  auto read = [](const std::string& file) -> absl::StatusOr<std::string> {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::NotFoundError("cannot read '" + file + "'");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  auto source = read(path);
  if (!source.ok())
    return absl::InvalidArgumentError("--chat-template: " + std::string(source.status().message()));
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (auto text = ReadTokenizerConfigJson(model_dir); text.ok()) {
    config = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) {
      return absl::InvalidArgumentError("the tokenizer_config.json of " + model_dir +
                                        " is not a JSON object");
    }
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  config["chat_template"] = *source;
  return ChatTemplate::FromConfig(config.dump(), path);
}

// What is read and checked before any worker starts: the model's config and
// tokenizer, the public port's security, the ports, the chat template.
struct ServeInputs {
  std::string dir;
  ModelConfig cfg;
  int tp = 1;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has none
  TlsFiles public_tls;
  std::shared_ptr<grpc::ServerCredentials> public_creds;
  std::vector<std::string> api_keys;
  std::string http_host;
  std::unique_ptr<ChatTemplate> chat_template;  // null: /v1/chat/completions is off
  std::optional<FimTokens> fim;                 // none: suffix is refused
};

absl::StatusOr<ServeInputs> CheckServeInputs(const ServeFlags& f) {
  ServeInputs in;
  in.dir = f.model;
  SHARDLM_ASSIGN_OR_RETURN(in.cfg, LoadModelConfig(in.dir));
  in.tp = f.tp;
  // Refuse a world size the model cannot be split into before starting anyone.
  if (auto plan = ShardPlan::Make(in.cfg, RankInfo{0, in.tp}); !plan.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tp ", in.tp, ": ", plan.status().message()));
  }
  if (auto tok = Tokenizer::ForModel(in.dir); tok.ok()) {
    in.tokenizer = std::move(*tok);
    in.fim = FindFimTokens(*in.tokenizer);
  } else if (!absl::IsNotFound(tok.status())) {
    return tok.status();
  }
  in.public_tls = f.tls;
  SHARDLM_ASSIGN_OR_RETURN(in.public_creds, ServerCredentials(in.public_tls, "--tls", "--tls-client-ca"));
  if (f.api_key_file) {
    SHARDLM_ASSIGN_OR_RETURN(in.api_keys, ReadApiKeys(*f.api_key_file));
  }
  SHARDLM_RETURN_IF_ERROR(CheckPortFree(f.host, f.port));
  in.http_host = f.http_host.value_or(f.host);
  if (!f.http_port) return in;
  if (absl::Status st = CheckPortFree(in.http_host, *f.http_port); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("--http-port: ", st.message()));
  }
  auto tmpl = f.chat_template ? ChatTemplateFromFile(*f.chat_template, in.dir) : ChatTemplate::Load(in.dir);
  if (tmpl.ok()) {
    in.chat_template = std::move(*tmpl);
  } else if (f.chat_template || !absl::IsNotFound(tmpl.status())) {
    return tmpl.status();
  } else {
    std::fprintf(stderr, "shardlm: %s; /v1/chat/completions is off\n",
                 std::string(tmpl.status().message()).c_str());
  }
  return in;
}

// The metrics port (when asked for), before any worker starts: a port in use
// is found first.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetrics(const ServeFlags& f,
                                                                MetricsRegistry& registry) {
  if (!f.metrics_port) return nullptr;
  const std::string host = f.metrics_host.value_or(f.host);
  SHARDLM_ASSIGN_OR_RETURN(
      auto http, MetricsHttpServer::Start(host, *f.metrics_port, [&registry] { return registry.Render(); }));
  std::printf("metrics on http://%s:%d/metrics\n", host.c_str(), http->port());
  std::fflush(stdout);
  return http;
}

absl::StatusOr<WorkerGroupOptions> GroupOptions(const ServeFlags& f, const CliEnv& env, const ServeInputs& in,
                                                bool spawn_local, ServiceMetrics* metrics) {
  WorkerGroupOptions go;
  go.model_dir = in.dir;
  go.tp = in.tp;
  ApplyWorkerFlags(f.engine, f.device, &go);
  if (spawn_local) {
    go.collectives = f.collectives;
    SHARDLM_RETURN_IF_ERROR(CheckLocalGpus(go.device, go.tp, go.collectives));
  }
  go.collective_timeout_ms = f.collective_timeout_ms;
  go.step_timeout_ms = f.step_timeout_ms;
  go.step_timeout_per_token_ms = f.step_timeout_per_token_ms;
  go.listen = f.worker_listen;
  go.spawn_local = spawn_local;
  go.exe = env.exe;
  // Local workers get a random token through their environment.
  SHARDLM_ASSIGN_OR_RETURN(InternalSecurity security,
                           ReadInternalSecurity(f.security, spawn_local ? RandomToken() : ""));
  go.internal_token = security.token;
  go.internal_tls = security.tls;
  go.metrics = metrics;
  return go;
}

Engine::Options EngineOptions(const ServeFlags& f, ServiceMetrics* metrics) {
  Engine::Options eo;
  ApplySchedulingFlags(f.scheduling, f.engine, &eo);
  eo.target_step_ms = f.target_step_ms;
  eo.handle_ttl_ms = f.handle_ttl_s * 1000;
  eo.prefix_caching = !f.no_prefix_caching;
  eo.max_queued_requests = f.max_queued_requests;
  eo.max_queued_tokens = f.max_queued_tokens;
  eo.max_handle_share = f.max_handle_share;
  eo.metrics = metrics;
  return eo;
}

// The prefix cache's changes over ZeroMQ (--kv-events-endpoint); null when off.
absl::StatusOr<std::unique_ptr<KvEventPublisher>> StartKvEvents(const ServeFlags& f,
                                                                const WorkerGroupOptions& go) {
  if (!f.kv_events_endpoint) {
    if (f.kv_events_replay_endpoint || f.kv_events_topic) {
      return absl::InvalidArgumentError(
          "--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint");
    }
    return nullptr;
  }
  if (f.no_prefix_caching) {
    return absl::InvalidArgumentError(
        "--kv-events-endpoint: KV events are the prefix cache's changes, and --no-prefix-caching turns it "
        "off");
  }
  KvEventPublisherOptions o;
  o.endpoint = *f.kv_events_endpoint;
  o.replay_endpoint = f.kv_events_replay_endpoint.value_or("");
  o.topic = f.kv_events_topic.value_or("");
  o.format.block_size = static_cast<int32_t>(go.block_size);
  // Where the blocks live: the workers' device (resolved here for "auto", as local workers resolve it).
  absl::StatusOr<c10::Device> device = ResolveDevice(go.device, 0);
  o.format.medium = device.ok() && device->is_cuda() ? "GPU" : "CPU";
  const std::string medium = o.format.medium;
  SHARDLM_ASSIGN_OR_RETURN(auto publisher, KvEventPublisher::Start(std::move(o)));
  std::printf("KV events on %s (topic '%s', medium %s)%s\n", publisher->endpoint().c_str(),
              f.kv_events_topic.value_or("").c_str(), medium.c_str(),
              publisher->replay_endpoint().empty()
                  ? ""
                  : absl::StrCat(", replay on ", publisher->replay_endpoint()).c_str());
  std::fflush(stdout);
  return publisher;
}

// Prompt + generated tokens at most: the model's positions, or the KV cache if smaller.
int64_t MaxContext(const ServeInputs& in, const GroupState& initial) {
  return std::min<int64_t>(in.cfg.max_position_embeddings,
                           static_cast<int64_t>(initial.num_blocks) * initial.block_size);
}

// The public gRPC port: the services (shardlm.v1, vLLM's engine protocol,
// health), reflection (unless --no-reflection). *port is the port bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpc(const ServeFlags& f, const ServeInputs& in,
                                                        const std::vector<grpc::Service*>& services,
                                                        int* port) {
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (f.no_reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  const std::string address = absl::StrCat(f.host, ":", f.port);
  builder.AddListeningPort(address, in.public_creds, port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  const int max_message = static_cast<int>(f.max_message_mb << 20);
  builder.SetMaxReceiveMessageSize(max_message);
  builder.SetMaxSendMessageSize(max_message);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is an error
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0)
    return absl::UnavailableError("cannot listen on " + address + " (address in use?)");
  return server;
}

// The names the model is served by (--served-model-name, else the model's own), first the main one.
std::vector<std::string> ServedNames(const ServeFlags& f, const ServeInputs& in) {
  std::vector<std::string> out;
  const std::string names = f.served_model_name.value_or(ModelDisplayName(in.dir));
  for (absl::string_view n : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    out.emplace_back(absl::StripAsciiWhitespace(n));
  }
  if (out.empty()) out.push_back(ModelDisplayName(in.dir));
  return out;
}

// What vLLM's engine protocol says of the model: the name routers route by.
VllmModel RouterModel(const ServeFlags& f, const ServeInputs& in, const GroupState& initial) {
  VllmModel m;
  m.model_path = f.router_model_path.value_or(std::filesystem::absolute(f.model).lexically_normal().string());
  m.max_context = MaxContext(in, initial);
  m.vocab_size = static_cast<int32_t>(in.cfg.vocab_size);
  m.eos_ids.assign(in.cfg.eos_token_ids.begin(), in.cfg.eos_token_ids.end());
  return m;
}

// What OpenAI's front ends need to know about the served model.
openai::ModelContext ModelContextOf(const ServeFlags& f, const ServeInputs& in, const GroupState& initial) {
  openai::ModelContext m;
  m.names = ServedNames(f, in);
  m.tokenizer = in.tokenizer.get();
  m.chat_template = in.chat_template.get();
  m.max_context = MaxContext(in, initial);
  m.vocab_size = static_cast<int32_t>(in.cfg.vocab_size);
  m.max_queued_sequences = f.max_queued_requests;
  m.fim = in.fim ? &*in.fim : nullptr;
  return m;
}

// The OpenAI HTTP API (when --http-port is given).
absl::StatusOr<std::unique_ptr<OpenAiHttpServer>> StartHttp(const ServeFlags& f, const ServeInputs& in,
                                                            const GroupState& initial, ServingCore* core,
                                                            std::function<bool()> ready,
                                                            const MetricsRegistry& registry,
                                                            std::vector<HttpRoute> extra_routes) {
  if (!f.http_port) return nullptr;
  OpenAiHttpOptions ho;
  ho.extra_routes = std::move(extra_routes);
  ho.host = in.http_host;
  ho.port = *f.http_port;
  ho.tls = in.public_tls;
  ho.threads = f.http_threads;
  ho.request_timeout = std::chrono::seconds(f.http_request_timeout_s);
  ho.max_idle_connections = f.http_max_idle_connections;
  ho.max_body_bytes = static_cast<size_t>(f.max_message_mb << 20);
  ho.model = ModelContextOf(f, in, initial);
  ho.ready = std::move(ready);
  ho.metrics = [&registry] { return registry.Render(); };
  SHARDLM_ASSIGN_OR_RETURN(auto http, OpenAiHttpServer::Start(core, std::move(ho)));
  std::printf("OpenAI API on http%s://%s:%d/v1\n", in.public_tls.enabled() ? "s" : "", in.http_host.c_str(),
              http->port());
  std::printf("Ollama API on http%s://%s:%d/api\n", in.public_tls.enabled() ? "s" : "", in.http_host.c_str(),
              http->port());
  return http;
}

// NOT_SERVING and UNAVAILABLE for new calls at once; every call in flight
// (tokenizing, queued or running, gRPC or HTTP) gets the grace period to
// finish, then whatever is left is cancelled.
void Drain(const ServeFlags& f, ServiceMetrics& metrics, EngineLoop& loop, ServingCore& core,
           WorkerGroup& group, grpc::Server& server, std::unique_ptr<OpenAiHttpServer>& http,
           StatefulApi* stateful, OllamaApi* ollama) {
  std::fprintf(stderr, "shardlm: draining (%d call(s) in flight, %d engine request(s))\n",
               metrics.calls_in_flight(), loop.pending());
  core.StartDraining();
  if (stateful != nullptr) stateful->StartDraining();  // queued runs wait for the next start
  group.BeginShutdown();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(f.shutdown_grace_s);
  while ((metrics.calls_in_flight() > 0 || loop.pending() > 0) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int left = metrics.calls_in_flight();
  std::fprintf(
      stderr, "shardlm: shutting down%s\n",
      left > 0 ? absl::StrCat(" (cancelling ", left, " call(s) past the grace period)").c_str() : "");
  // gRPC cancels its calls at once; the HTTP server cancels its own and waits
  // for their threads; the engine loop, then the group, go on return.
  server.Shutdown(std::chrono::system_clock::now());
  if (stateful != nullptr)
    stateful->Stop();  // runs still generating end failed; streamed ones free their threads
  if (ollama != nullptr) ollama->Stop();  // its requests still running are cancelled
  http.reset();
}

// Flags to options, the checks, the workers, the engine, the servers; then
// serving until SIGTERM, and the drain.
int ServeImpl(int argc, char** argv, const CliEnv& env, bool spawn_local) {
  ServeFlags f;
  FlagSet flags(spawn_local ? "serve" : "coordinator");
  DeclareServeFlags(flags, spawn_local, &f);
  int code = 0;
  if (!ParseCommandLine(flags, argc, argv, 0, &code)) return code;
  absl::StatusOr<ServeInputs> in = CheckServeInputs(f);
  if (!in.ok()) return Fail(in.status());
  // The stateful APIs' database (with the HTTP API only), before any worker starts: a bad one fails fast.
  absl::StatusOr<std::unique_ptr<StateStore>> state = std::unique_ptr<StateStore>();
  if (f.http_port) state = OpenServeState(f, env);
  if (!state.ok()) return Fail(state.status());
  MetricsRegistry registry;
  ServiceMetrics metrics(&registry);
  auto metrics_http = StartMetrics(f, registry);
  if (!metrics_http.ok()) return Fail(metrics_http.status());

  auto go = GroupOptions(f, env, *in, spawn_local, &metrics);
  if (!go.ok()) return Fail(go.status());
  // The draft model (in this process) before the workers: one that does not fit the target fails fast.
  auto draft = OpenDraftModel(f.engine, f.device, in->tokenizer.get(), in->cfg);
  if (!draft.ok()) return Fail(draft.status());
  auto kv_events = StartKvEvents(f, *go);  // before the engine, which publishes into it
  if (!kv_events.ok()) return Fail(kv_events.status());
  auto group = WorkerGroup::Start(*go);
  if (!group.ok()) return Fail(group.status());
  WorkerGroup* g = group->get();
  const GroupState initial = g->state();
  Engine::Options eo = EngineOptions(f, &metrics);
  eo.kv_events = kv_events->get();
  if (*draft) eo.speculation.draft = (*draft)->proposer.get();
  EngineLoop loop(std::make_unique<Engine>(g, in->cfg, initial.num_blocks, initial.block_size, eo),
                  [g] { return g->state(); });
  ServedModel served{go->dtype == "auto" ? (in->cfg.torch_dtype == "float32" ? "f32" : "bf16") : go->dtype,
                     go->tp, go->block_size, eo.handle_ttl_ms};
  metrics.AddVllmNames(ServedNames(f, *in).front(), initial.block_size, initial.num_blocks);
  ServingCore core(&loop, in->tokenizer.get(), served);
  core.SetApiKeys(in->api_keys);
  core.SetMetrics(&metrics);
  InferenceService service(&core);

  std::atomic<bool> draining{false};
  // Ready once every listener accepts (the "serving" line below), while the
  // worker group serves and until draining begins: the same on gRPC and HTTP.
  std::atomic<bool> listening{false};
  auto ready = [g, &draining, &listening] { return listening.load() && g->serving() && !draining.load(); };
  HealthService health(ready);
  VllmEngineService vllm(&core, RouterModel(f, *in, initial), ready);
  int port = 0;
  auto server = StartGrpc(f, *in, {&service, &vllm, &health}, &port);
  if (!server.ok()) return Fail(server.status());
  // The stateful APIs share the HTTP port: they start with it, and outlive it.
  auto stateful = StatefulApi::Start(&core, state->get(),
                                     {ServedNames(f, *in), ModelContextOf(f, *in, initial), f.state_runs});
  if (!stateful.ok()) return Fail(stateful.status());
  // Ollama's API shares it too (docs/ollama.md).
  std::unique_ptr<OllamaApi> ollama;
  std::vector<HttpRoute> extra_routes;
  if (f.http_port) {
    ollama = OllamaApi::Start(
        &core, OllamaOptionsOf(f.model, in->cfg, ModelContextOf(f, *in, initial),
                               ResolveDevice(go->device, 0).value_or(c10::Device("cpu")).is_cuda()));
    extra_routes = (*stateful)->Routes();
    for (HttpRoute& r : ollama->Routes()) extra_routes.push_back(std::move(r));
  }
  auto http = StartHttp(f, *in, initial, &core, ready, registry, std::move(extra_routes));
  if (!http.ok()) return Fail(http.status());
  listening = true;  // the gRPC, HTTP and metrics ports all listen by now
  std::printf("shardlm serving %s (%s, tp=%d, %d KV blocks of %lld tokens) on %s:%d%s%s\n", in->dir.c_str(),
              in->cfg.architecture.c_str(), go->tp, initial.num_blocks,
              static_cast<long long>(go->block_size), f.host.c_str(), port,
              in->public_tls.enabled() ? " (TLS)" : "", in->api_keys.empty() ? "" : " (API keys required)");
  std::fflush(stdout);
  while (!env.stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  draining = true;
  Drain(f, metrics, loop, core, *g, **server, *http, stateful->get(), ollama.get());
  return 0;  // loop, then group (stopping the workers), are destroyed on return
}

}  // namespace

int RunServe(int argc, char** argv, const CliEnv& env) { return ServeImpl(argc, argv, env, true); }
int RunCoordinator(int argc, char** argv, const CliEnv& env) { return ServeImpl(argc, argv, env, false); }

}  // namespace shardlm
