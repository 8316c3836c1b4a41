// The packed layout (packing, row lookup) and the portable packed kernel.
#include "kernels/cpu/packed.h"

#include <cmath>

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

// A value as T holds it: f32 as is, bf16 rounded.
template <typename T>
float Rounded(float v) {
  T t;
  PutFloat(&t, v);
  return ToFloat(t);
}

// Output row `row` of panel-packed rows for activation row x, in k order.
template <typename T>
float Dot(const T* x, const T* w, int64_t row, int64_t k) {
  float s = 0.0f;
  for (int64_t c = 0; c < k; ++c) s += ToFloat(x[c]) * ToFloat(w[PackedIndex<T>(row, c, k)]);
  return s;
}

template <typename T>
void Portable(const PackedArgs<T>& a, int64_t p_begin, int64_t p_end) {
  if (a.epilogue == PackedEpilogue::kSwiGlu) {
    // Gate panel j is packed panel 2j, up panel j is 2j + 1: in the packed
    // row space, feature f of pair j is row 2j * 48 + f % 48 (gate) and 48 more (up).
    for (int64_t p = p_begin; p < p_end; p += 2) {
      const int64_t j = p / 2;
      for (int64_t f = j * kPanelRows; f < (j + 1) * kPanelRows && f < a.n; ++f) {
        const int64_t gate_row = p * kPanelRows + f % kPanelRows, up_row = gate_row + kPanelRows;
        for (int64_t i = 0; i < a.m; ++i) {
          const T* x = a.x + i * a.ldx;
          const float g = Rounded<T>(Dot(x, a.w, gate_row, a.k)), u = Rounded<T>(Dot(x, a.w, up_row, a.k));
          const float act = Rounded<T>(g / (1.0f + std::exp(-g)));
          PutFloat(a.y + i * a.ldy + f, act * u);
        }
      }
    }
    return;
  }
  for (int64_t p = p_begin; p < p_end; ++p) {
    for (int64_t row = p * kPanelRows; row < (p + 1) * kPanelRows && row < a.n; ++row) {
      for (int64_t i = 0; i < a.m; ++i) {
        float s = Dot(a.x + i * a.ldx, a.w, row, a.k);
        if (a.bias != nullptr) s += ToFloat(a.bias[row]);
        T* y = a.y + i * a.ldy + row;
        if (a.epilogue == PackedEpilogue::kAddTo) s = ToFloat(*y) + Rounded<T>(s);
        PutFloat(y, s);
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

// One panel: rows [0, min(rows, 48)) of w[., k] (w at the panel's first row),
// the rest zero, into `out` (PackedElements(48, k) elements).
template <typename T>
T* PackPanel(const T* w, int64_t rows, int64_t k, T* out) {
  constexpr int64_t g = kGroup<T>;
  for (int64_t s = 0; s < Steps<T>(k); ++s) {
    for (int64_t j = 0; j < kPanelRows; ++j) {
      for (int64_t c = 0; c < g; ++c) {
        const int64_t col = s * g + c;
        *out++ = j < rows && col < k ? w[j * k + col] : T{0};
      }
    }
  }
  return out;
}

template <typename T>
void PackWeight(const T* w, int64_t n, int64_t k, T* out) {
  // Panel-major, so the writes are sequential.
  for (int64_t p = 0; p * kPanelRows < n; ++p)
    out = PackPanel(w + p * kPanelRows * k, n - p * kPanelRows, k, out);
}

template <typename T>
int64_t PackedGatedElements(int64_t inter, int64_t k) {
  return 2 * PackedElements<T>(inter, k);
}

template <typename T>
void PackGatedWeight(const T* w, int64_t inter, int64_t k, T* out) {
  for (int64_t j = 0; j * kPanelRows < inter; ++j) {
    const T* gate = w + j * kPanelRows * k;
    out = PackPanel(gate, inter - j * kPanelRows, k, out);
    out = PackPanel(gate + inter * k, inter - j * kPanelRows, k, out);
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
template int64_t PackedGatedElements<float>(int64_t, int64_t);
template int64_t PackedGatedElements<uint16_t>(int64_t, int64_t);
template void PackGatedWeight<float>(const float*, int64_t, int64_t, float*);
template void PackGatedWeight<uint16_t>(const uint16_t*, int64_t, int64_t, uint16_t*);
template void UnpackRows<float>(const float*, int64_t, int64_t, const int64_t*, int64_t, float*);
template void UnpackRows<uint16_t>(const uint16_t*, int64_t, int64_t, const int64_t*, int64_t, uint16_t*);

namespace internal {
void PackedF32Scalar(const PackedArgs<float>& a, int64_t b, int64_t e) { Portable(a, b, e); }
void PackedBf16Scalar(const PackedArgs<uint16_t>& a, int64_t b, int64_t e) { Portable(a, b, e); }
}  // namespace internal

PackedF32Fn PackedF32(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::PackedF32Avx512;
    case Isa::kAvx2:
      return internal::PackedF32Avx2;
    default:
      return internal::PackedF32Scalar;
  }
}
PackedBf16Fn PackedBf16(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return internal::PackedBf16Avx512;
    case Isa::kAvx2:
      return internal::PackedBf16Avx2;
    default:
      return internal::PackedBf16Scalar;
  }
}

}  // namespace shardlm::kernels
