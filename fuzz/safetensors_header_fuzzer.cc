// libFuzzer target: ParseSafetensorsHeader must return a status for every
// byte string, never crash, never read outside the buffer (ASan checks), and
// every view it returns must lie inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = shardlm::ParseSafetensorsHeader(data, size, "fuzz.safetensors");
  if (!header.ok()) return 0;
  for (const auto& [name, view] : header->tensors) {
    const uint8_t* end = view.data + view.nbytes;
    if (view.data < data || end > data + size) std::abort();
    if (view.numel() * static_cast<int64_t>(shardlm::DTypeSize(view.dtype)) !=
        static_cast<int64_t>(view.nbytes)) {
      std::abort();
    }
    // Touch the bytes so ASan sees any out-of-range view.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < view.nbytes; i += 4096) sink ^= view.data[i];
    (void)sink;
  }
  return 0;
}
