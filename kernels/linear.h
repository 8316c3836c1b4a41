// The projections of the forward pass: out = x @ w^T (+ bias), nn.Linear's
// contract, on the CPU.
//
//   x    dtype[m, in]      rows contiguous (a row stride is allowed)
//   w    dtype[out, in]    the weight as the checkpoint stores it
//   out  dtype[m, out]
//
// Up to GemvMaxRows(dtype) rows go to the kernels of cpu/gemv.h, which
// stream the weight once across all threads; more go to ATen's GEMM (OpenBLAS
// for f32, oneDNN for bf16). On AVX-512 the kernels take any number of rows
// with one read of the weight, and serve every f32 product and bf16 up to 16
// rows; the AVX2 kernels read the weight once per 8 rows, so they stop at 8
// (f32) and 4 (bf16). The cut-overs are where GEMM wins (docs/cpu_kernels.md).
//
//   at::Tensor y = kernels::Linear(h, layer.qkv, layer.qkv_bias);
//
// The MLP's gate/up product and the residual adds after the o and down
// products can run fused into the product (LinearSwiGlu, LinearAddTo): the
// outputs are finished while in registers instead of written, read back and
// written again by a separate element-wise pass over cold cache lines.
//
// A model's weights are prepared once at load (LinearWeight::Prepare): on a
// CPU with the AVX-512 or AVX2 kernels they are repacked into the panels of
// cpu/packed.h, which every number of rows then goes through (the weight
// streams once per call; docs/cpu_kernels.md, "Packed weights"). Unpacked
// weights (packing turned off) take the GEMV kernels and ATen's GEMM above.
//
//   layer.qkv = kernels::LinearWeight::Prepare(at::cat({q, k, v}, 0));
//   at::Tensor y = kernels::Linear(h, layer.qkv, layer.qkv_bias);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/quant.h"

namespace shardlm::kernels {

// Rows up to which Linear uses the GEMV kernels for `dtype`
// (KernelOptions::gemv_max_rows overrides; 0 turns them off, for comparisons).
int64_t GemvMaxRows(at::ScalarType dtype);

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor());

// A projection's weight, dtype[out, in], in the layout Linear reads fastest.
class LinearWeight {
 public:
  LinearWeight() = default;

  // Packs an f32 or bf16 CPU weight when the active ISA is AVX2 or AVX-512 (and
  // KernelOptions::pack_weights is on); otherwise keeps `w` as it is. The
  // unpacked tensor is released.
  static LinearWeight Prepare(at::Tensor w);
  // A SwiGLU's [gate; up] weight, dtype[2 * inter, in], for LinearSwiGlu:
  // packed as gate/up pairs of panels where Prepare would pack, so that the
  // product finishes silu(gate) * up itself. Such a packed weight goes only
  // through LinearSwiGlu.
  static LinearWeight PrepareGated(at::Tensor gate_up);
  // A weight kept in ggml blocks (cpu/quant.h): `rows` uint8[n, k / 32 *
  // block bytes], n rows of GGUF blocks, repacked into the quantized panels.
  // CPU only. Products take f32 or bf16 activations and give their dtype.
  static LinearWeight PrepareQuantized(BlockFormat format, const at::Tensor& rows, int64_t k);
  // Parts of rows in different block formats, one after another along the
  // outputs (a GGUF's q/k/v where v has more bits than q and k): each part
  // packed in its own format, one product over all of them.
  struct QuantRows {
    BlockFormat format;
    at::Tensor rows;  // uint8[n_i, k / unit * block bytes]
  };
  static LinearWeight PrepareQuantized(const std::vector<QuantRows>& parts, int64_t k);
  // A weight kept in GGUF blocks on a GPU (every format but Q2_K and Q3_K;
  // docs/gpu_quantized.md): `rows` uint8[n, k / unit * block bytes] on the
  // host, repacked into the planes of cuda/quant_planes.h and moved to
  // `device`. Products of up to cuda_fused.h's CudaQuantMaxRows rows unpack
  // the blocks in registers, 8 rows a launch (cuda/quant_gemv.h); more rows
  // multiply the weight dequantized to x's dtype for the call (cuBLAS).
  static LinearWeight PrepareGpuQuantized(BlockFormat format, const at::Tensor& rows, int64_t k,
                                          at::Device device);
  // Parts in different formats (q/k/v where v has more bits): consecutive
  // parts of one format share a segment; a product launches once per segment.
  static LinearWeight PrepareGpuQuantized(const std::vector<QuantRows>& parts, int64_t k, at::Device device);

  bool defined() const { return data_.defined(); }
  bool packed() const { return packed_; }
  bool gated() const { return gated_; }
  bool quantized() const { return quantized_; }  // in the CPU's quantized panels
  // In a GPU's planes (PrepareGpuQuantized).
  bool gpu_quantized() const { return gpu_quantized_; }
  // Their format where they have one; kNone where the segments differ or the
  // weight is not in a GPU's planes.
  BlockFormat gpu_format() const { return gpu_format_; }
  // A quantized weight's runs of rows, each in one format, in output order.
  struct QuantSegment {
    BlockFormat format;
    int64_t row0, rows;  // outputs [row0, row0 + rows)
    int64_t offset;      // byte offset of its panels in storage()
  };
  const std::vector<QuantSegment>& quant_segments() const { return segments_; }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  // The weight's dtype; uint8 (at::kByte) when quantized.
  at::ScalarType dtype() const { return data_.scalar_type(); }
  // Bytes held (a packed weight's padding included): what a product streams.
  int64_t nbytes() const { return defined() ? static_cast<int64_t>(data_.nbytes()) : 0; }
  // The unpacked weight; undefined when packed or quantized.
  at::Tensor plain() const { return packed_ || quantized_ || gpu_quantized_ ? at::Tensor() : data_; }
  const at::Tensor& storage() const { return data_; }

  // Rows of the weight, dtype[index.size(0), in] (an embedding lookup from a
  // tied LM head; f32 when quantized). Indices are clamped to [0, out).
  at::Tensor Rows(const at::Tensor& index) const;

 private:
  at::Tensor data_;
  bool packed_ = false;
  bool gated_ = false;
  bool quantized_ = false;
  bool gpu_quantized_ = false;
  BlockFormat gpu_format_ = BlockFormat::kNone;
  std::vector<QuantSegment> segments_;
  int64_t out_ = 0, in_ = 0;
};

at::Tensor Linear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias = at::Tensor());

// silu(x @ gate^T) * (x @ up^T): dtype[m, inter], for a weight from
// PrepareGated. Packed, the product's epilogue computes it (no [m, 2 * inter]
// intermediate); otherwise Linear then SiluMul (kernels/fused.h). The same
// bits either way.
at::Tensor LinearSwiGlu(const at::Tensor& x, const LinearWeight& gate_up);

// y += x @ w^T (+ bias), the product rounded to the dtype before the add: the
// residual add after a projection (at tensor parallelism 1, where nothing is
// reduced in between). Packed, done in the product's epilogue; otherwise
// Linear then AddInPlace. y: dtype[m, out], contiguous.
void LinearAddTo(at::Tensor& y, const at::Tensor& x, const LinearWeight& w,
                 const at::Tensor& bias = at::Tensor());

}  // namespace shardlm::kernels
