// A step's host-side arrays on the compute device in one copy.
//
// On a GPU every small input of a step (token ids, slots, rotary angles,
// block tables) would otherwise be its own host-to-device transfer, each with
// its own latency. StepUpload packs them into one host buffer (pinned for
// CUDA), copies it once without blocking, and hands out typed views of the
// device copy. On the CPU the views are of the host buffer itself.
//
//   StepUpload up;
//   const int ids = up.Add(ids64.data(), T);         // int64
//   const int cos = up.Add(cos_host.data(), T * half);  // f32
//   up.Upload(device);
//   at::Tensor ids_dev = up.Get(ids);                 // int64[T] on the device
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardlm {

class StepUpload {
 public:
  int Add(const int64_t* data, int64_t n) { return AddBytes(data, n, at::kLong, sizeof(int64_t)); }
  int Add(const int32_t* data, int64_t n) { return AddBytes(data, n, at::kInt, sizeof(int32_t)); }
  int Add(const float* data, int64_t n) { return AddBytes(data, n, at::kFloat, sizeof(float)); }
  int Add(const double* data, int64_t n) { return AddBytes(data, n, at::kDouble, sizeof(double)); }
  template <typename T>
  int Add(const std::vector<T>& v) {
    return Add(v.data(), static_cast<int64_t>(v.size()));
  }

  // One copy of every region to `device`; Get works afterwards.
  void Upload(at::Device device);
  // One copy of every region into the first bytes() of `buffer` (uint8, on any
  // device), which Get's views then refer to. A CUDA graph's static inputs
  // (model/step_graphs.h) are such a buffer: a step with the same regions in
  // the same order, the last one possibly shorter, lands where the graph reads.
  void UploadInto(const at::Tensor& buffer);
  int64_t bytes() const { return static_cast<int64_t>(host_.size()); }
  // Region `index` as a 1-D tensor of its type on the device.
  at::Tensor Get(int index) const;

 private:
  struct Region {
    int64_t offset, count;
    at::ScalarType type;
  };
  int AddBytes(const void* data, int64_t n, at::ScalarType type, int64_t elem);

  std::vector<uint8_t> host_;
  std::vector<Region> regions_;
  at::Tensor device_;  // uint8[bytes]
};

}  // namespace shardlm
