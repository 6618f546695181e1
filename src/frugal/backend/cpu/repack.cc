#include "frugal/backend/cpu/repack.h"

#include <cstdlib>
#include <cstring>

#include "frugal/quant/blocks.h"
#include "frugal/quant/simd_kernels.h"

namespace frugal::cpu {

namespace {

// FRUGAL_CPU_REPACK=0 keeps every weight in the file's layout (to compare the two).
bool repack_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FRUGAL_CPU_REPACK");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace

WeightLayout preferred_layout(const WeightTensor& w) {
  if (!repack_enabled()) return WeightLayout::kRows;
  // Q4_0 in groups of 8 rows: one-token products on AVX2 share each activation load across 8
  // rows; the rows must be a whole number of groups and stored back to back.
  if (w.type == DType::kQ4_0 && w.layout == WeightLayout::kRows && w.rows > 0 &&
      w.rows % quant::fast::kQ4x8Rows == 0 && w.cols % quant::kQK == 0 &&
      w.row_stride == static_cast<size_t>(w.cols / quant::kQK) * sizeof(quant::BlockQ4_0) &&
      quant::fast::q4_0x8_repack_wins()) {
    return WeightLayout::kQ4_0x8;
  }
  return WeightLayout::kRows;
}

uint64_t repack_in_place(WeightTensor& w, void* data, WeightLayout layout) {
  if (layout != WeightLayout::kQ4_0x8 || w.layout != WeightLayout::kRows) return 0;
  auto* p = static_cast<uint8_t*>(data);
  const size_t group_bytes = quant::fast::kQ4x8Rows * w.row_stride;
  for (int64_t g = 0; g < w.rows / quant::fast::kQ4x8Rows; ++g) {
    quant::fast::repack_q4_0x8(p + static_cast<size_t>(g) * group_bytes, w.cols);
  }
  w.layout = layout;
  w.data = data;
  return static_cast<uint64_t>(w.rows) * w.row_stride;
}

}  // namespace frugal::cpu
