// libFuzzer target: ParseGguf and the Hugging Face view of its result must
// return a status for every byte string, never crash or throw, never read
// outside the buffer (ASan checks), and every tensor must lie inside it; the
// first row of every block-quantized tensor (each of the GGUF block formats
// read, K-quants included) is dequantized inside its bytes.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/quant_blocks.h"

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
  auto views = shardlm::GgufTensorViews(*header, "fuzz.gguf");
  if (views.ok()) {
    for (const auto& [name, v] : *views) {
      if (v.block == shardlm::BlockFormat::kNone || v.shape.empty()) continue;
      const shardlm::BlockLayout layout = shardlm::BlockLayoutOf(v.block);
      const int64_t n = std::min<int64_t>(v.shape.back(), 4096) / layout.elements * layout.elements;
      if (n <= 0) continue;
      if (static_cast<uint64_t>(n / layout.elements * layout.bytes) > v.nbytes) std::abort();
      std::vector<float> row(static_cast<size_t>(n));
      shardlm::DequantizeBlocks(v.block, v.data, n, row.data());
    }
  }
  (void)shardlm::GgufTokenizerJson(*header, "fuzz.gguf");
  (void)shardlm::GgufTokenizerConfigJson(*header, "fuzz.gguf");
  return 0;
}
