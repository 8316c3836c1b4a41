// What this machine can do at best, measured in the same run as the figures
// compared with it (bench/engine_bench.cc, bench/kernels_bench.cc):
//
//   ReadBandwidth()      bytes/s one streaming read of a 1 GiB buffer reaches
//                        with every compute thread (each byte read once: the
//                        floor of a decode step is weight bytes / this, not a
//                        memcpy's bytes copied, which moves each byte twice);
//   ReferenceGemvBytesPerSecond(dtype)
//                        a plain C GEMV (llama2.c's loop: a dot product per
//                        output row, rows split across threads, f32
//                        accumulation) over a weight as large as the model's:
//                        what simple code achieves;
//   GemmFlops(dtype)     the faster of ATen's GEMM (OpenBLAS f32, oneDNN
//                        bf16) and the engine's own kernels::Linear (packed
//                        weights on AVX-512) on a 1024x2048x2048 product: the
//                        compute ceiling for prefill and large batches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardlm::bench {

double ReadBandwidth();
double ReferenceGemvBytesPerSecond(at::ScalarType dtype, int64_t weight_bytes);
double GemmFlops(at::ScalarType dtype);

// The same limits of a GPU (any device ATen has), timed to a stream sync:
//   DeviceReadBandwidth  bytes/s read by a read-only kernel: the sum of 2 GiB
//                        of f32 (each byte read once, nothing written but the
//                        sum), the best of five rounds of four; `rounds`, when
//                        given, receives every round's figure (the spread).
//                        A decode step only reads its weights: a copy, which
//                        reads and writes, is not the limit it is held to;
//   DeviceGemmFlops      an 8192^3 product in `dtype` (cuBLAS).
double DeviceReadBandwidth(at::Device device, std::vector<double>* rounds = nullptr);
double DeviceGemmFlops(at::Device device, at::ScalarType dtype);

}  // namespace shardlm::bench
