#include "cli/serve_flags.h"

namespace shardlm {
namespace {

// The public API's own: TLS and keys, reflection, message size, the metrics
// and HTTP ports, the served name and the chat template.
void DeclarePublicApiFlags(FlagSet& f, ServeFlags* o) {
  f.String("tls-cert", "PEM certificate of the public port (TLS)").To(&o->tls.cert);
  f.String("tls-key", "PEM private key of the public port").To(&o->tls.key);
  f.String("tls-client-ca", "PEM CA: clients must present a certificate it signed (mutual TLS)")
      .To(&o->tls.client_ca);
  f.String("api-key-file", "API keys, one per line; calls must send 'authorization: Bearer KEY'")
      .To(&o->api_key_file);
  f.Bool("no-reflection", "do not serve gRPC server reflection").To(&o->no_reflection);
  f.Int("max-message-mb", "largest request or response message on the public port", 64, 1, 1024)
      .To(&o->max_message_mb);
  f.Int("metrics-port", "serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; unset: off)",
        0, 0, 65535)
      .To(&o->metrics_port);
  f.String("metrics-host", "address of the metrics port (default: --host)").To(&o->metrics_host);
  f.Int("http-port", "serve the OpenAI-compatible HTTP API on this port (0: any free port; unset: off)", 0, 0,
        65535)
      .To(&o->http_port);
  f.String("http-host", "address of the HTTP API (default: --host)").To(&o->http_host);
  f.Int("http-threads",
        "HTTP completions run at once (more wait their turn; health, models and metrics never wait)", 64, 1,
        4096)
      .To(&o->http_threads);
  f.Int("http-request-timeout-s",
        "an HTTP request (headers and body) must arrive within this many seconds of its first byte", 30, 1,
        3600)
      .To(&o->http_request_timeout_s);
  f.Int("http-max-idle-connections",
        "kept-alive HTTP connections left open between requests (past this the oldest is closed)", 256, 1,
        65536)
      .To(&o->http_max_idle_connections);
  f.String("served-model-name",
           "model name(s) the HTTP API answers to, comma-separated (default: the model "
           "directory's name)")
      .To(&o->served_model_name);
  f.String("chat-template",
           "a Jinja chat template file used instead of the model's tokenizer_config.json one")
      .To(&o->chat_template);
  f.String("router-model-path",
           "what vLLM's engine protocol (GetModelInfo) reports as model_path: the name SGLang's model "
           "gateway routes requests by and loads the tokenizer from, a directory holding tokenizer.json "
           "(`shardlm export-tokenizer` writes one for a GGUF file) (default: --model, made absolute)")
      .To(&o->router_model_path);
}

// The prefix cache's changes over ZeroMQ, in vLLM's format (docs/kv_events.md).
void DeclareKvEventsFlags(FlagSet& f, ServeFlags* o) {
  f.String("kv-events-endpoint",
           "publish the prefix cache's changes (KV events, vLLM's format) on a ZeroMQ PUB socket: "
           "'tcp://*:5557' binds, 'tcp://HOST:PORT' connects (unset: off)")
      .To(&o->kv_events_endpoint);
  f.String("kv-events-topic", "the topic frame of every KV event message (llm-d reads kv@POD@MODEL)")
      .To(&o->kv_events_topic);
  f.String("kv-events-replay-endpoint",
           "bind a ZeroMQ ROUTER socket here that replays recent KV event batches from a sequence number")
      .To(&o->kv_events_replay_endpoint);
}

// The stateful APIs' database (docs/stateful_apis.md section 8), read with --http-port only.
void DeclareStateFlags(FlagSet& f, ServeFlags* o) {
  f.String("state-db",
           "where the Assistants API keeps its objects: sqlite:///ABS/PATH, a PostgreSQL URI "
           "(postgresql://user@host:port/db; replicas may share one; give the password in PGPASSWORD or "
           "~/.pgpass), or none (default: sqlite:///<--state-dir>/state.db)")
      .To(&o->state_db);
  f.String("state-dir",
           "directory of the default state database (default: $XDG_STATE_HOME/shardlm, else "
           "$HOME/.local/state/shardlm)")
      .To(&o->state_dir);
  f.Int("state-runs",
        "Assistants API runs generating at once (more wait in their queue), and background responses "
        "(more are refused: 429)",
        16, 1, 1024)
      .To(&o->state_runs);
}

}  // namespace

void DeclareServeFlags(FlagSet& f, bool spawn_local, ServeFlags* o) {
  f.EnableConfig();  // --config FILE, SHARDLM_* variables, --print-config
  f.String("model", "checkpoint directory or .gguf file", true).To(&o->model);
  f.Int("tp", "tensor-parallel size (worker processes)", 1, 1, 64).To(&o->tp);
  f.String("host", "address the public API listens on", false, "127.0.0.1").To(&o->host);
  f.Int("port", "port of the public API (shardlm.v1.Inference)", 50051, 0, 65535).To(&o->port);
  f.String("worker-listen", "address workers register at (port 0: any)", false,
           spawn_local ? "127.0.0.1:0" : "0.0.0.0:50052")
      .To(&o->worker_listen);
  AddEngineFlags(f, &o->engine);
  AddDeviceFlags(f, &o->device);
  if (spawn_local) AddCollectivesFlag(f, &o->collectives);
  f.Int("target-step-ms",
        "cut long prompts into chunks so a step takes about this long (from the measured cost of a token "
        "and of the context it attends to; a cancelled or late request stops within about two steps); 0: off",
        250, 0, 600000)
      .To(&o->target_step_ms);
  AddSchedulingFlags(f, &o->scheduling);
  f.Int("max-queued-requests", "requests waiting at most; past it new ones get RESOURCE_EXHAUSTED", 1024, 1,
        1 << 24)
      .To(&o->max_queued_requests);
  f.Int("max-queued-tokens", "prompt tokens waiting at most; past it new requests get RESOURCE_EXHAUSTED",
        1 << 20, 1, int64_t{1} << 40)
      .To(&o->max_queued_tokens);
  f.Float("max-handle-share", "share of the KV cache that kept ChunkResult handles may pin", 0.5, 0.0, 1.0,
          /*min_exclusive=*/true)
      .To(&o->max_handle_share);
  f.Int("collective-timeout-ms", "a collective slower than this fails the step", 10000, 100, 3600000)
      .To(&o->collective_timeout_ms);
  f.Int("step-timeout-ms", "a step's deadline: this plus --step-timeout-per-token-ms per token", 60000, 1000,
        3600000)
      .To(&o->step_timeout_ms);
  f.Int("step-timeout-per-token-ms",
        "extra step deadline per token in the step (at least 8x the recent rate)", 20, 0, 60000)
      .To(&o->step_timeout_per_token_ms);
  f.Int("handle-ttl-s", "a ChunkResult handle not released expires after this", 600, 1, 7 * 24 * 3600)
      .To(&o->handle_ttl_s);
  f.Bool("no-prefix-caching", "do not reuse KV blocks of identical prompt prefixes")
      .To(&o->no_prefix_caching);
  f.Int("shutdown-grace-s",
        "on SIGTERM, calls in flight (tokenizing, queued or running) get this long to finish; the rest are "
        "cancelled",
        30, 0, 3600)
      .To(&o->shutdown_grace_s);
  DeclarePublicApiFlags(f, o);
  DeclareKvEventsFlags(f, o);
  DeclareStateFlags(f, o);
  AddInternalSecurityFlags(f, /*insecure_flag=*/!spawn_local, &o->security);
}

}  // namespace shardlm
