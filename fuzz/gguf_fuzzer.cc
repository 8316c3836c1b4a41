// libFuzzer target: ParseGguf and the Hugging Face view of its result must
// return a status for every byte string, never crash or throw, never read
// outside the buffer (ASan checks), and every tensor must lie inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/gguf.h"
#include "formats/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = shardlm::ParseGguf(data, size, "fuzz.gguf");
  if (!header.ok()) return 0;
  for (const shardlm::GgufTensorInfo& t : header->tensors) {
    if (t.data < data || t.data + t.nbytes > data + size) std::abort();
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.nbytes; i += 4096) sink ^= t.data[i];
    (void)sink;
  }
  (void)shardlm::GgufConfigJson(*header, "fuzz.gguf");
  (void)shardlm::GgufTensorViews(*header, "fuzz.gguf");
  (void)shardlm::GgufTokenizerJson(*header, "fuzz.gguf");
  (void)shardlm::GgufTokenizerConfigJson(*header, "fuzz.gguf");
  return 0;
}
