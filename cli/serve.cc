// `shardlm serve` (coordinator + N local workers) and `shardlm coordinator`
// (workers join from elsewhere, e.g. a Kubernetes StatefulSet).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/logging.h"
#include "coordinator/engine_loop.h"
#include "coordinator/health_service.h"
#include "coordinator/inference_service.h"
#include "coordinator/worker_group.h"
#include "model/model_config.h"

namespace shardlm {
namespace {

int ServeImpl(int argc, char** argv, const CliEnv& env, bool spawn_local) {
  FlagSet f(spawn_local ? "serve" : "coordinator");
  f.String("model", "checkpoint directory", true);
  f.Int("tp", "tensor-parallel size (worker processes)", 1, 1, 64);
  f.String("host", "address the public API listens on", false, "127.0.0.1");
  f.Int("port", "port of the public API (shardlm.v1.Inference)", 50051, 0, 65535);
  f.String("worker-listen", "address workers register at (port 0: any)", false,
           spawn_local ? "127.0.0.1:0" : "0.0.0.0:50052");
  f.String("dtype", "compute dtype", false, "auto", {"auto", "f32", "bf16"});
  f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20);
  f.Int("max-batch-tokens", "tokens per engine step", 2048, 1, 1 << 20);
  f.Int("collective-timeout-ms", "a collective slower than this fails the step", 10000, 100, 3600000);
  f.Int("step-timeout-ms", "a step (e.g. a long prefill) slower than this fails", 60000, 1000, 3600000);
  f.Int("handle-ttl-s", "a ChunkResult handle not released expires after this", 600, 1, 7 * 24 * 3600);
  f.Bool("no-prefix-caching", "do not reuse KV blocks of identical prompt prefixes");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  const std::string dir = f.GetString("model");
  auto cfg = LoadModelConfig(dir);
  if (!cfg.ok()) return Fail(cfg.status());
  std::unique_ptr<Tokenizer> tokenizer;
  if (std::filesystem::exists(dir + "/tokenizer.json")) {
    auto tok = Tokenizer::Load(dir + "/tokenizer.json");
    if (!tok.ok()) return Fail(tok.status());
    tokenizer = std::move(*tok);
  }
  WorkerGroupOptions go;
  go.model_dir = dir;
  go.tp = static_cast<int>(f.GetInt("tp"));
  go.dtype = f.GetString("dtype");
  go.kv_cache_bytes = f.GetInt("kv-cache-mb") << 20;
  go.collective_timeout_ms = f.GetInt("collective-timeout-ms");
  go.step_timeout_ms = f.GetInt("step-timeout-ms");
  go.listen = f.GetString("worker-listen");
  go.spawn_local = spawn_local;
  go.exe = env.exe;
  if (!spawn_local) {
    std::fprintf(stderr, "waiting for %d workers at %s\n", go.tp, go.listen.c_str());
  }
  auto group = WorkerGroup::Start(go);
  if (!group.ok()) return Fail(group.status());
  RemoteExecutor* exec = (*group)->executor();
  Engine::Options eo;
  eo.max_batch_tokens = f.GetInt("max-batch-tokens");
  eo.handle_ttl_ms = f.GetInt("handle-ttl-s") * 1000;
  eo.prefix_caching = !f.GetBool("no-prefix-caching");
  EngineLoop loop(std::make_unique<Engine>(exec, *cfg, exec->num_blocks(), exec->block_size(), eo));
  InferenceService service(
      &loop, tokenizer.get(),
      ServedModel{go.dtype == "auto" ? (cfg->torch_dtype == "float32" ? "f32" : "bf16") : go.dtype, go.tp,
                  go.block_size});
  HealthService health([exec] { return exec->healthy(); });
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::StrCat(f.GetString("host"), ":", f.GetInt("port"));
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Fail(absl::UnavailableError("cannot listen on " + address));
  std::printf("shardlm serving %s (%s, tp=%d, %d KV blocks of %lld tokens) on %s:%d\n", dir.c_str(),
              cfg->architecture.c_str(), go.tp, exec->num_blocks(), static_cast<long long>(go.block_size),
              f.GetString("host").c_str(), port);
  std::fflush(stdout);
  int reported_dead = 0;
  while (!env.stop->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if ((*group)->dead_workers() > reported_dead) {
      reported_dead = (*group)->dead_workers();
      LOG(ERROR) << reported_dead << " worker process(es) died; requests now fail with UNAVAILABLE";
    }
  }
  std::fprintf(stderr, "shardlm: shutting down\n");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;  // loop, then group (stopping the workers), are destroyed on return
}

}  // namespace

int RunServe(int argc, char** argv, const CliEnv& env) { return ServeImpl(argc, argv, env, true); }
int RunCoordinator(int argc, char** argv, const CliEnv& env) { return ServeImpl(argc, argv, env, false); }

}  // namespace shardlm
