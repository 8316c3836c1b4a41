// A quantized weight's GGUF blocks repacked into panels, and rows read back
// from them (kernels/cpu/quant.h; the layout in quant_layout.h).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/gguf_unit.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_layout.h"

namespace shardlm::kernels {
namespace {

// Row r of the panel unit at `unit`: its scales, then each sub-block's quants.
void WriteUnit(BlockFormat f, const UnitValues& u, int64_t r, uint8_t* unit) {
  const QuantPanelLayout l = QuantLayoutOf(f);
  std::memcpy(unit + 2 * r, &u.d, 2);
  if (HasSecondScale(f)) std::memcpy(unit + kQuantSecondScale + 2 * r, &u.second, 2);
  if (f == BlockFormat::kQ6_K) {
    for (int j = 0; j < 16; ++j) unit[kQuant6Scales + 16 * j + r] = u.sc[j];
  } else if (IsKQuant(f)) {
    for (int b = 0; b < 8; ++b) {
      unit[kQuantKScales + 16 * b + r] = u.sc[b];
      unit[kQuantKMins + 16 * b + r] = u.mn[b];
    }
  }
  for (int64_t sb = 0; sb < l.unit / kQuantSubBlock; ++sb) {
    uint8_t* q = unit + l.scale_bytes + sb * l.sub_bytes;
    for (int64_t j = 0; j < kQuantSubBlock; ++j) {
      const uint8_t v = u.q[sb * kQuantSubBlock + j];
      const int64_t at = 4 * r + j % 4;
      if (l.bits == 8) {
        q[(j / 4) * 64 + at] = v;
        continue;
      }
      q[(j / 8) * 64 + at] |= static_cast<uint8_t>(j % 8 < 4 ? (v & 0x0f) : (v & 0x0f) << 4);
      if (l.bits > 4) {
        const int64_t hb = l.bits - 4, s = j / 4;
        q[256 + (s * hb / 8) * 64 + at] |= static_cast<uint8_t>((v >> 4) << (s * hb % 8));
      }
    }
  }
}

// The value of row r, k j of the panel unit at `unit`, as formats/quant_blocks.cc computes it
// from the file (this file is built without FMA instructions: each product rounds).
float UnitValue(BlockFormat f, const uint8_t* unit, int64_t r, int64_t j) {
  const QuantPanelLayout l = QuantLayoutOf(f);
  const int64_t sb = j / kQuantSubBlock;
  const int q = PanelQuant(l.bits, unit + l.scale_bytes + sb * l.sub_bytes, r, j % kQuantSubBlock);
  const float d = HalfBitsToFloat(LoadHalfBits(unit + 2 * r));
  const float second =
      HasSecondScale(f) ? HalfBitsToFloat(LoadHalfBits(unit + kQuantSecondScale + 2 * r)) : 0.0f;
  switch (f) {
    case BlockFormat::kQ4_1:
    case BlockFormat::kQ5_1:
      return static_cast<float>(q) * d + second;
    case BlockFormat::kQ4_K:
    case BlockFormat::kQ5_K: {
      const float sc = unit[kQuantKScales + 16 * sb + r], mn = unit[kQuantKMins + 16 * sb + r];
      return (d * sc) * static_cast<float>(q) - second * mn;
    }
    case BlockFormat::kQ6_K: {
      const float sc = static_cast<int8_t>(unit[kQuant6Scales + 16 * (j / 16) + r]);
      return (d * sc) * static_cast<float>(q - 32);
    }
    default:  // Q8_0, Q4_0, Q5_0
      return static_cast<float>(q + static_cast<int>(QuantOffset(f))) * d;
  }
}

}  // namespace

int64_t QuantUnit(BlockFormat f) { return QuantLayoutOf(f).unit; }

int64_t QuantPackedBytes(BlockFormat f, int64_t n, int64_t k) {
  const int64_t panels = (n + kQuantPanelRows - 1) / kQuantPanelRows;
  return panels * (k / QuantUnit(f)) * QuantUnitBytes(f);
}

void PackQuantWeight(BlockFormat f, const uint8_t* rows, int64_t n, int64_t k, uint8_t* out) {
  const int64_t units = k / QuantUnit(f), gb = BlockLayoutOf(f).bytes, ub = QuantUnitBytes(f);
  std::memset(out, 0, static_cast<size_t>(QuantPackedBytes(f, n, k)));
  UnitValues u;
  for (int64_t o = 0; o < n; ++o) {
    const int64_t p = o / kQuantPanelRows, r = o % kQuantPanelRows;
    for (int64_t b = 0; b < units; ++b) {
      ReadUnit(f, rows + (o * units + b) * gb, &u);
      WriteUnit(f, u, r, out + (p * units + b) * ub);
    }
  }
}

void UnpackQuantRows(BlockFormat f, const uint8_t* packed, int64_t n, int64_t k, const int64_t* rows,
                     int64_t count, float* out) {
  const int64_t unit = QuantUnit(f), units = k / unit, ub = QuantUnitBytes(f);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t o = std::clamp<int64_t>(rows[i], 0, n - 1);
    const int64_t p = o / kQuantPanelRows, r = o % kQuantPanelRows;
    for (int64_t b = 0; b < units; ++b) {
      const uint8_t* blk = packed + (p * units + b) * ub;
      for (int64_t j = 0; j < unit; ++j) out[i * k + b * unit + j] = UnitValue(f, blk, r, j);
    }
  }
}

}  // namespace shardlm::kernels
