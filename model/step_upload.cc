#include "model/step_upload.h"

#include <ATen/ATen.h>

#include <cstring>

namespace shardlm {

int StepUpload::AddBytes(const void* data, int64_t n, at::ScalarType type, int64_t elem) {
  // Regions start 16-byte aligned, so every typed view is aligned.
  const int64_t offset = (static_cast<int64_t>(host_.size()) + 15) / 16 * 16;
  host_.resize(offset + n * elem);
  if (n > 0) std::memcpy(host_.data() + offset, data, n * elem);
  regions_.push_back(Region{offset, n, type});
  return static_cast<int>(regions_.size()) - 1;
}

void StepUpload::Upload(at::Device device) {
  const int64_t bytes = std::max<int64_t>(16, static_cast<int64_t>(host_.size()));
  at::TensorOptions opts = at::TensorOptions().dtype(at::kByte);
  // Pinned memory lets the copy run asynchronously; ATen's host allocator
  // keeps the buffer alive until the copy has finished.
  if (device.is_cuda()) opts = opts.pinned_memory(true);
  at::Tensor host = at::empty({bytes}, opts);
  if (!host_.empty()) std::memcpy(host.data_ptr(), host_.data(), host_.size());
  device_ = device.is_cpu() ? host : host.to(device, /*non_blocking=*/true);
}

void StepUpload::UploadInto(const at::Tensor& buffer) {
  TORCH_CHECK(buffer.scalar_type() == at::kByte && buffer.dim() == 1 && buffer.numel() >= bytes(),
              "step upload: a buffer of ", bytes(), " bytes is needed, got ", buffer.numel());
  device_ = buffer;
  if (host_.empty()) return;
  at::Tensor dst = buffer.narrow(0, 0, bytes());
  if (buffer.is_cpu()) {
    std::memcpy(dst.data_ptr(), host_.data(), host_.size());
    return;
  }
  at::Tensor host = at::empty({bytes()}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), host_.data(), host_.size());
  dst.copy_(host, /*non_blocking=*/true);
}

at::Tensor StepUpload::Get(int index) const {
  const Region& r = regions_.at(index);
  const int64_t elem = static_cast<int64_t>(c10::elementSize(r.type));
  if (r.count == 0) return at::empty({0}, device_.options().dtype(r.type));
  return device_.narrow(0, r.offset, r.count * elem).view(r.type);
}

}  // namespace shardlm
