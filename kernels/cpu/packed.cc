// The packed layout (packing, row lookup) and the portable packed kernel.
#include "kernels/cpu/packed.h"

namespace shardlm::kernels {
namespace {

// k values that share one packed slot: a bf16 pair, or one f32.
template <typename T>
constexpr int64_t kGroup = sizeof(T) == 2 ? 2 : 1;

template <typename T>
int64_t Steps(int64_t k) {
  return (k + kGroup<T> - 1) / kGroup<T>;
}

template <typename T>
int64_t PackedIndex(int64_t row, int64_t col, int64_t k) {
  constexpr int64_t g = kGroup<T>;
  return ((row / kPanelRows) * Steps<T>(k) + col / g) * kPanelRows * g + (row % kPanelRows) * g + col % g;
}

template <typename T>
void Portable(const PackedArgs<T>& a, int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t row = p * kPanelRows; row < (p + 1) * kPanelRows && row < a.n; ++row) {
      for (int64_t i = 0; i < a.m; ++i) {
        const T* x = a.x + i * a.ldx;
        float s = 0.0f;
        for (int64_t k = 0; k < a.k; ++k) s += ToFloat(x[k]) * ToFloat(a.w[PackedIndex<T>(row, k, a.k)]);
        if (a.bias != nullptr) s += ToFloat(a.bias[row]);
        PutFloat(a.y + i * a.ldy + row, s);
      }
    }
  }
}

}  // namespace

template <typename T>
int64_t PackedElements(int64_t n, int64_t k) {
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  return panels * Steps<T>(k) * kPanelRows * kGroup<T>;
}

template <typename T>
void PackWeight(const T* w, int64_t n, int64_t k, T* out) {
  // Panel-major, so the writes are sequential.
  constexpr int64_t g = kGroup<T>;
  const int64_t panels = (n + kPanelRows - 1) / kPanelRows;
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t s = 0; s < Steps<T>(k); ++s) {
      for (int64_t j = 0; j < kPanelRows; ++j) {
        const int64_t row = p * kPanelRows + j;
        for (int64_t c = 0; c < g; ++c) {
          const int64_t col = s * g + c;
          *out++ = row < n && col < k ? w[row * k + col] : T{0};
        }
      }
    }
  }
}

template <typename T>
void UnpackRows(const T* packed, int64_t n, int64_t k, const int64_t* rows, int64_t count, T* out) {
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = rows[r] < 0 ? 0 : (rows[r] >= n ? n - 1 : rows[r]);
    for (int64_t col = 0; col < k; ++col) out[r * k + col] = packed[PackedIndex<T>(row, col, k)];
  }
}

template int64_t PackedElements<float>(int64_t, int64_t);
template int64_t PackedElements<uint16_t>(int64_t, int64_t);
template void PackWeight<float>(const float*, int64_t, int64_t, float*);
template void PackWeight<uint16_t>(const uint16_t*, int64_t, int64_t, uint16_t*);
template void UnpackRows<float>(const float*, int64_t, int64_t, const int64_t*, int64_t, float*);
template void UnpackRows<uint16_t>(const uint16_t*, int64_t, int64_t, const int64_t*, int64_t, uint16_t*);

namespace internal {
void PackedF32Scalar(const PackedArgs<float>& a, int64_t b, int64_t e) { Portable(a, b, e); }
void PackedBf16Scalar(const PackedArgs<uint16_t>& a, int64_t b, int64_t e) { Portable(a, b, e); }
}  // namespace internal

PackedF32Fn PackedF32(Isa isa) {
  return isa == Isa::kAvx512 ? internal::PackedF32Avx512 : internal::PackedF32Scalar;
}
PackedBf16Fn PackedBf16(Isa isa) {
  return isa == Isa::kAvx512 ? internal::PackedBf16Avx512 : internal::PackedBf16Scalar;
}

}  // namespace shardlm::kernels
