#include "bench/machine_limits.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/cpu/gemv.h"
#include "kernels/linear.h"

namespace shardlm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// The reference GEMV: y[n] = sum_k w[n, k] x[k], one row per iteration,
// plain loops the compiler vectorises (this file is built with -O3 and the
// machine's own instruction set), as llama2.c's matmul. The row's dot product
// is a function of its own: inlined into the OpenMP-outlined lambda, GCC 12
// vectorised it with gathers and ran 2x slower than plain code does.
template <typename T>
__attribute__((noinline)) float PlainDot(const T* __restrict row, const float* __restrict x, int64_t k) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < k; ++j) {
    if constexpr (sizeof(T) == 2) {
      s += kernels::Bf16ToFloat(row[j]) * x[j];
    } else {
      s += row[j] * x[j];
    }
  }
  return s;
}

template <typename T>
void PlainGemv(const T* w, const float* x, float* y, int64_t n, int64_t k) {
  at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = PlainDot(w + i * k, x, k);
  });
}

}  // namespace

double ReadBandwidth() {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of floats
  std::vector<float> buf(n, 1.0f);
  const kernels::SumF32Fn sum = kernels::SumF32(kernels::ActiveIsa());
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const int threads = at::get_num_threads();
    std::vector<float> part(threads, 0.0f);
    auto t0 = Clock::now();
    at::parallel_for(0, n, n / threads,
                     [&](int64_t b, int64_t e) { part[at::get_thread_num()] += sum(buf.data() + b, e - b); });
    best = std::max(best, n * sizeof(float) / Seconds(t0));
    for (float p : part) sink = sink + p;
  }
  return best;
}

double ReferenceGemvBytesPerSecond(at::ScalarType dtype, int64_t weight_bytes) {
  const int64_t k = 2048, elem = dtype == at::kFloat ? 4 : 2;
  const int64_t n = std::max<int64_t>(1, weight_bytes / (k * elem));
  at::Tensor w = at::rand({n, k}).to(dtype);
  std::vector<float> x(k, 0.5f), y(n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    if (dtype == at::kFloat) {
      PlainGemv(w.data_ptr<float>(), x.data(), y.data(), n, k);
    } else {
      PlainGemv(reinterpret_cast<const uint16_t*>(w.data_ptr()), x.data(), y.data(), n, k);
    }
    best = std::max(best, static_cast<double>(w.nbytes()) / Seconds(t0));
  }
  return best;
}

double GemmFlops(at::ScalarType dtype) {
  const int64_t m = 1024, n = 2048, k = 2048;
  at::Tensor a = at::rand({m, k}).to(dtype), b = at::rand({n, k}).to(dtype);
  const kernels::LinearWeight packed = kernels::LinearWeight::Prepare(b.clone());
  auto best_of = [&](auto fn) {
    fn();  // warm-up
    double best = 0;
    for (int rep = 0; rep < 4; ++rep) {
      auto t0 = Clock::now();
      fn();
      best = std::max(best, 2.0 * m * n * k / Seconds(t0));
    }
    return best;
  };
  return std::max(best_of([&] { at::linear(a, b); }), best_of([&] { kernels::Linear(a, packed); }));
}

namespace {

// Waits for the device's queued work: a one-element copy to the host.
void Sync(const at::Tensor& t) { (void)t.flatten()[0].to(at::kCPU).item<double>(); }

}  // namespace

double DeviceReadBandwidth(at::Device device, std::vector<double>* rounds) {
  const int64_t bytes = int64_t{2} << 30;
  at::Tensor a = at::ones({bytes / 4}, at::TensorOptions().dtype(at::kFloat).device(device));
  at::Tensor s = a.sum();  // warm-up
  Sync(s);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < 4; ++i) s = a.sum();
    Sync(s);
    const double rate = 4.0 * bytes / Seconds(t0);
    if (rounds != nullptr) rounds->push_back(rate);
    best = std::max(best, rate);
  }
  return best;
}

double DeviceGemmFlops(at::Device device, at::ScalarType dtype) {
  const int64_t n = 8192;
  at::Tensor a = at::randn({n, n}, at::TensorOptions().dtype(dtype).device(device));
  at::Tensor b = at::randn({n, n}, at::TensorOptions().dtype(dtype).device(device));
  at::Tensor c = at::matmul(a, b);
  Sync(c);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (int i = 0; i < 5; ++i) c = at::matmul(a, b);
    Sync(c);
    best = std::max(best, 5 * 2.0 * n * n * n / Seconds(t0));
  }
  return best;
}

}  // namespace shardlm::bench
