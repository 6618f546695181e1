#include "frugal/core/dtype.h"

#include <array>
#include <cctype>
#include <cstdlib>

namespace frugal {
namespace {

constexpr std::array<DTypeLayout, 26> kLayouts = {{
    {DType::kF32, "f32", 1, 4},
    {DType::kF16, "f16", 1, 2},
    {DType::kQ4_0, "q4_0", 32, 18},
    {DType::kQ4_1, "q4_1", 32, 20},
    {DType::kQ5_0, "q5_0", 32, 22},
    {DType::kQ5_1, "q5_1", 32, 24},
    {DType::kQ8_0, "q8_0", 32, 34},
    {DType::kQ8_1, "q8_1", 32, 36},
    {DType::kQ2_K, "q2_K", 256, 84},
    {DType::kQ3_K, "q3_K", 256, 110},
    {DType::kQ4_K, "q4_K", 256, 144},
    {DType::kQ5_K, "q5_K", 256, 176},
    {DType::kQ6_K, "q6_K", 256, 210},
    {DType::kQ8_K, "q8_K", 256, 292},
    {DType::kIQ4_NL, "iq4_nl", 32, 18},
    {DType::kI8, "i8", 1, 1},
    {DType::kI16, "i16", 1, 2},
    {DType::kI32, "i32", 1, 4},
    {DType::kI64, "i64", 1, 8},
    {DType::kF64, "f64", 1, 8},
    {DType::kBF16, "bf16", 1, 2},
    {DType::kMXFP4, "mxfp4", 32, 17},
    {DType::kNVFP4, "nvfp4", 64, 36},
    {DType::kHBQ_A, "hbq_a", 128, 70},
    {DType::kHBQ_E, "hbq_e", 128, 67},
    {DType::kFLUXBIN, "fluxbin", 128, 36},
}};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<DTypeLayout> dtype_layout(uint32_t ggml_type_id) {
  for (const auto& l : kLayouts) {
    if (static_cast<uint32_t>(l.type) == ggml_type_id) return l;
  }
  return std::nullopt;
}

const DTypeLayout& dtype_layout(DType type) {
  for (const auto& l : kLayouts) {
    if (l.type == type) return l;
  }
  std::abort();  // programming error: every DType enumerator has a row above
}

std::string_view dtype_name(DType type) { return dtype_layout(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& l : kLayouts) {
    if (iequals(l.name, name)) return l.type;
  }
  return std::nullopt;
}

}  // namespace frugal
