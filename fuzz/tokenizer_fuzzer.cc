// libFuzzer target: the Llama-3 tokenizer (the npm fixture's tokenizer.json,
// path in SHARDLM_FUZZ_TOKENIZER) must encode every byte string to a status
// or ids within a time budget: more than 100 ms per KB (and 100 ms at least)
// is a failure, the quadratic or worse behaviour a long word used to have.
// Decoding the ids must give back the text when it was valid UTF-8 and the
// encoding succeeded.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace {

const shardlm::Tokenizer& Get() {
  static std::unique_ptr<shardlm::Tokenizer> tok = [] {
    const char* path = std::getenv("SHARDLM_FUZZ_TOKENIZER");
    auto t = shardlm::Tokenizer::Load(path != nullptr ? path : "tokenizer.json");
    if (!t.ok()) {
      std::fprintf(stderr, "tokenizer_fuzzer: %s (set SHARDLM_FUZZ_TOKENIZER)\n",
                   std::string(t.status().message()).c_str());
      std::abort();
    }
    return std::move(*t);
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const shardlm::Tokenizer& tok = Get();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto start = std::chrono::steady_clock::now();
  auto ids = tok.Encode(text, /*add_special_tokens=*/false);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double budget_ms = std::max(100.0, 100.0 * static_cast<double>(size) / 1024.0);
  if (ms > budget_ms) {
    std::fprintf(stderr, "tokenizer_fuzzer: %zu bytes took %.1f ms (budget %.1f)\n", size, ms, budget_ms);
    std::abort();
  }
  if (ids.ok() && tok.Decode(*ids, /*skip_special=*/false) != text) {
    std::fprintf(stderr, "tokenizer_fuzzer: decode(encode(text)) != text for %zu bytes\n", size);
    std::abort();
  }
  return 0;
}
