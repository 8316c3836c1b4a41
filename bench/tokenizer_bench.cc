// Tokenization throughput: MB/s of one tokenizer on text files, median of
// --runs, single-threaded (as one request is tokenized). bench/tokenizer_bench.py
// runs it next to Hugging Face's `tokenizers` on the same inputs.
//
//   build/shardlm_tokenizer_bench --model DIR_OR_GGUF [--runs 5] FILE...
//   -> one line per file: "FILE BYTES TOKENS MEDIAN_SECONDS MB_PER_S"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string model;
  int runs = 5;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      files.push_back(a);
    }
  }
  if (model.empty() || files.empty()) {
    std::fprintf(stderr, "usage: shardlm_tokenizer_bench --model DIR_OR_GGUF [--runs N] FILE...\n");
    return 2;
  }
  auto tok = shardlm::Tokenizer::ForModel(model);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  for (const std::string& file : files) {
    auto text = shardlm::ReadFileToString(file);
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    std::vector<double> seconds;
    size_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      auto ids = (*tok)->Encode(*text, /*add_special_tokens=*/false);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!ids.ok()) {
        std::fprintf(stderr, "%s: %s\n", file.c_str(), std::string(ids.status().message()).c_str());
        return 1;
      }
      tokens = ids->size();
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("%s %zu %zu %.6f %.2f\n", file.c_str(), text->size(), tokens, median,
                text->size() / median / 1e6);
  }
  return 0;
}
