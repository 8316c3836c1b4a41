// ggml's block formats of quantized weights, by name and layout: what a GGUF
// file stores (formats/quant_blocks.h dequantizes and quantizes them) and what
// the CPU kernels repack and multiply (kernels/cpu/quant.h). Header-only, so
// that both can share it without a link between them.
#pragma once

#include <cstdint>

namespace shardlm {

enum class BlockFormat { kNone, kQ8_0, kQ4_0, kQ4_1 };

struct BlockLayout {
  int64_t elements = 1;  // weights per block
  int64_t bytes = 0;     // bytes per block
};

// Q8_0: 32 weights in 34 bytes; Q4_0: 32 in 18; Q4_1: 32 in 20; kNone: {1, 0}.
constexpr BlockLayout BlockLayoutOf(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return {32, 34};
    case BlockFormat::kQ4_0:
      return {32, 18};
    case BlockFormat::kQ4_1:
      return {32, 20};
    case BlockFormat::kNone:
      break;
  }
  return {1, 0};
}

// "Q8_0", "Q4_0", "Q4_1" as GGUF names them; "none".
constexpr const char* BlockFormatName(BlockFormat format) {
  switch (format) {
    case BlockFormat::kQ8_0:
      return "Q8_0";
    case BlockFormat::kQ4_0:
      return "Q4_0";
    case BlockFormat::kQ4_1:
      return "Q4_1";
    case BlockFormat::kNone:
      break;
  }
  return "none";
}

}  // namespace shardlm
