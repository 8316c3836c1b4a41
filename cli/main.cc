// shardlm: one binary, subcommands. Environment variables are read here only.
#include <ATen/Parallel.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "common/logging.h"
#include "common/openmp_env.h"
#include "kernels/kernel_options.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

constexpr char kUsage[] =
    "usage: shardlm COMMAND [flags]\n"
    "commands:\n"
    "  serve             coordinator + N local tensor-parallel workers, gRPC API on --port\n"
    "  coordinator       the coordinator alone; workers join from elsewhere\n"
    "  generate          generate text from a prompt (streams unless --json)\n"
    "  score             per-token log-probabilities of a text\n"
    "  batch             a JSONL file of prompts at full throughput -> JSONL results (or via --server)\n"
    "  bench             load generator for a running server: Poisson rate or fixed concurrency\n"
    "  prefill           run a chunk on a server, keep its KV as a ChunkResult handle (JSON out)\n"
    "  tokenize          JSON lines {\"text\"} on stdin -> {\"ids\"} on stdout\n"
    "  export-tokenizer  write a model's tokenizer.json and tokenizer_config.json (for routers)\n"
    "  make-tiny-model   write a random Hugging Face checkpoint for tests\n"
    "  worker            one tensor-parallel rank (started by a coordinator or serve)\n"
    "Run `shardlm COMMAND --help` for a command's flags.\n";

// The npm fixtures: $SHARDLM_NPM_DIR, else third_party/npm/node_modules next
// to the build directory that holds this binary, else under the working dir.
std::string FindNpmDir() {
  if (const char* env = std::getenv("SHARDLM_NPM_DIR")) return env;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (fs::path dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.parent_path();
       dir = dir.parent_path()) {
    fs::path candidate = dir / "third_party/npm/node_modules";
    if (fs::exists(candidate)) return candidate.string();
  }
  return (fs::current_path(ec) / "third_party/npm/node_modules").string();
}

}  // namespace

int main(int argc, char** argv) {
  // The long-running server processes, before libgomp has read its
  // environment: this may run the binary again (common/openmp_env.h).
  // Short commands (generate, tokenize, ...) keep their startup time.
  if (argc >= 2 && (std::strcmp(argv[1], "serve") == 0 || std::strcmp(argv[1], "worker") == 0 ||
                    std::strcmp(argv[1], "coordinator") == 0)) {
    shardlm::UseShortOpenMpSpin(argv);
  }
  shardlm::InitLogging(argv[0]);
  if (absl::Status st = shardlm::kernels::SetKernelOptionsFromEnvironment(); !st.ok()) {
    std::fprintf(stderr, "shardlm: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  shardlm::CliEnv env;
  env.npm_dir = FindNpmDir();
  std::error_code ec;
  env.exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  env.stop = &g_stop;
  if (const char* token = std::getenv("SHARDLM_INTERNAL_TOKEN")) env.internal_token = token;
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && xdg[0] == '/') {
    env.state_home = std::string(xdg) + "/shardlm";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/') {
    env.state_home = std::string(home) + "/.local/state/shardlm";
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const std::string cmd = argv[1];
  if (cmd == "generate") return shardlm::RunGenerate(argc, argv, env);
  if (cmd == "score") return shardlm::RunScore(argc, argv, env);
  if (cmd == "batch") return shardlm::RunBatch(argc, argv, env);
  if (cmd == "bench") return shardlm::RunBench(argc, argv, env);
  if (cmd == "prefill") return shardlm::RunPrefill(argc, argv, env);
  if (cmd == "tokenize") return shardlm::RunTokenize(argc, argv, env);
  if (cmd == "export-tokenizer") return shardlm::RunExportTokenizer(argc, argv, env);
  if (cmd == "make-tiny-model") return shardlm::RunMakeTinyModel(argc, argv, env);
  if (cmd == "worker") return shardlm::RunWorker(argc, argv, env);
  if (cmd == "serve") return shardlm::RunServe(argc, argv, env);
  if (cmd == "coordinator") return shardlm::RunCoordinator(argc, argv, env);
  std::fprintf(stderr, "shardlm: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
