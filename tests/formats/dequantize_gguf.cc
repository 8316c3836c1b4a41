// Writes a GGUF file's block-quantized tensors dequantized by shardlm
// (formats/quant_blocks.h), as raw little-endian f32, one file per tensor:
// OUT_DIR/<tensor name>.f32. tests/formats/check_dequantize.py compares them
// with gguf-py's dequantization bit for bit.
//
//   dequantize_gguf FILE OUT_DIR [TENSOR...]   (no TENSOR: every block tensor)
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/quant_blocks.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dequantize_gguf FILE OUT_DIR [TENSOR...]\n");
    return 2;
  }
  auto file = shardlm::GgufFile::Open(argv[1]);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", std::string(file.status().message()).c_str());
    return 1;
  }
  const std::set<std::string> only(argv + 3, argv + argc);
  int written = 0;
  for (const shardlm::GgufTensorInfo& t : (*file)->header().tensors) {
    const shardlm::BlockFormat format = shardlm::GgmlBlockFormat(t.type);
    if (format == shardlm::BlockFormat::kNone || (!only.empty() && !only.count(t.name))) continue;
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    std::vector<float> out(static_cast<size_t>(n));
    shardlm::DequantizeBlocks(format, t.data, n, out.data());
    std::ofstream f(std::string(argv[2]) + "/" + t.name + ".f32", std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()),
            static_cast<std::streamsize>(out.size() * sizeof(float)));
    ++written;
  }
  std::printf("%d tensors\n", written);
  return 0;
}
