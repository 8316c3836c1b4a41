// The element-wise parts of a decoder layer as single passes over memory,
// so that a decode step is the weight streaming and little else: at batch 1
// each of these touches a few KB, where a chain of ATen operators (cast, pow,
// mean, rsqrt, mul, cast, mul for one RMSNorm) costs microseconds per
// operator in dispatch and temporaries.
//
// Rounding follows Hugging Face where it rounds: RMSNorm normalises in f32,
// casts to the compute dtype, then scales by the weight in that dtype. The
// rest compute in f32 and round once to the dtype (docs/numerics.md).
//
//   at::Tensor h = kernels::RmsNorm(x, layer.input_norm, eps);    // dtype[T, hidden]
//   kernels::RotaryInPlace(qkv, hq + hkv, head_dim, cos, sin);    // q and k heads
//   kernels::AddInPlace(x, reduced);                              // residual
//   at::Tensor act = kernels::SiluMul(gate_up);                   // dtype[T, inter]
//
// On a device other than the CPU (CUDA) each of these is a short chain of
// ATen operators with the same rounding points: the device's own kernels run
// them, and a step there is a few launches per operator, not a pass over
// host memory. ForceAtenOps(true) takes that path on the CPU too, so that
// tests on machines without a GPU check the arithmetic the GPU path runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace shardlm::kernels {

// The ATen-operator path for CPU tensors as well (tests only; process-wide).
void ForceAtenOps(bool on);
// True when `t` takes the ATen-operator path: it is not on the CPU, or ForceAtenOps is on.
bool UseAtenOps(const at::Tensor& t);

// x: dtype[rows, dim] (row stride allowed), weight: dtype[dim] -> dtype[rows, dim]
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RMSNorm of each head_dim-long head in columns [first_head * head_dim,
// (first_head + heads) * head_dim) of every row of x (Qwen3's q/k norm), in place.
void RmsNormHeadsInPlace(at::Tensor& x, int64_t first_head, int64_t heads, int64_t head_dim,
                         const at::Tensor& weight, double eps);

// Rotate-half rotary embedding of heads [0, heads) of each row of x
// (dtype[rows, >= heads * head_dim]), in place. cos, sin: f32[rows, head_dim / 2].
void RotaryInPlace(at::Tensor& x, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                   const at::Tensor& sin);

// x += y, both dtype[rows, dim] contiguous.
void AddInPlace(at::Tensor& x, const at::Tensor& y);

// gate_up: dtype[rows, 2 * inter] -> silu(gate) * up: dtype[rows, inter]
at::Tensor SiluMul(const at::Tensor& gate_up);

// x as f32 (the logits for sampling). On the CPU a bf16 x is widened on the
// step's thread pool (kernels/parallel.h): ATen's cast starts an OpenMP
// region, whose threads then spin beside the pool's.
at::Tensor ToFloat32(const at::Tensor& x);

}  // namespace shardlm::kernels
