#include "frugal/quantize/target.h"

#include <cctype>

namespace frugal::quantize {
namespace {

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

}  // namespace

const std::vector<Target>& all_targets() {
  static const std::vector<Target> targets = {
      {"F32", FileType::kAllF32, DType::kF32, "32-bit floats"},
      {"F16", FileType::kF16, DType::kF16, "16-bit floats"},
      {"BF16", FileType::kBF16, DType::kBF16, "bfloat16"},
      {"Q8_0", FileType::kQ8_0, DType::kQ8_0, "8.5 bits per weight"},
      {"Q4_0", FileType::kQ4_0, DType::kQ4_0, "4.5 bpw"},
      {"Q4_1", FileType::kQ4_1, DType::kQ4_1, "5.0 bpw"},
      {"Q5_0", FileType::kQ5_0, DType::kQ5_0, "5.5 bpw"},
      {"Q5_1", FileType::kQ5_1, DType::kQ5_1, "6.0 bpw"},
      {"IQ4_NL", FileType::kIQ4_NL, DType::kIQ4_NL, "4.5 bpw, non-linear grid"},
      {"MXFP4", FileType::kMXFP4, DType::kMXFP4, "4.25 bpw, E2M1 with an E8M0 scale per 32"},
      {"NVFP4", FileType::kNVFP4, DType::kNVFP4, "4.5 bpw, E2M1 with an E4M3 scale per 16 and one per tensor"},
      {"HBQ_A", FileType::kHBQ_A, DType::kHBQ_A, "4.375 bpw, E2M1, UE5M3 scale per 128, 2-bit significand scale per 8"},
      {"HBQ_E", FileType::kHBQ_E, DType::kHBQ_E, "4.19 bpw, E2M1, UE5M3 scale per 128, 2-bit significand scale per 32"},
      {"FLUXBIN", FileType::kFLUXBIN, DType::kFLUXBIN, "2.25 bpw + column scales, two binary bases, LUT GEMV"},
      {"FLUXBIN_HYBRID", FileType::kFLUXBIN_HYBRID, DType::kFLUXBIN, "FLUXBIN + 8 salient columns per 128 at int4"},
      {"Q2_K", FileType::kQ2_K, DType::kQ2_K, "Q2_K, attn_v/ffn_down/attn_output raised"},
      {"Q2_K_S", FileType::kQ2_K_S, DType::kQ2_K, "Q2_K, fewer tensors raised; needs --imatrix"},
      {"Q3_K_S", FileType::kQ3_K_S, DType::kQ3_K, "Q3_K everywhere but output"},
      {"Q3_K_M", FileType::kQ3_K_M, DType::kQ3_K, "Q3_K, attn_v/ffn_down/attn_output raised"},
      {"Q3_K_L", FileType::kQ3_K_L, DType::kQ3_K, "Q3_K, attn_v/ffn_down/attn_output at Q5_K"},
      {"Q4_K_S", FileType::kQ4_K_S, DType::kQ4_K, "Q4_K, early attn_v/ffn_down at Q5_K"},
      {"Q4_K_M", FileType::kQ4_K_M, DType::kQ4_K, "Q4_K, half of attn_v/ffn_down at Q6_K"},
      {"Q5_K_S", FileType::kQ5_K_S, DType::kQ5_K, "Q5_K everywhere but output"},
      {"Q5_K_M", FileType::kQ5_K_M, DType::kQ5_K, "Q5_K, half of attn_v/ffn_down at Q6_K"},
      {"Q6_K", FileType::kQ6_K, DType::kQ6_K, "6.56 bpw"},
  };
  return targets;
}

std::optional<Target> find_target(std::string_view name) {
  if (iequal(name, "Q4_K")) name = "Q4_K_M";
  if (iequal(name, "Q5_K")) name = "Q5_K_M";
  if (iequal(name, "Q3_K")) name = "Q3_K_M";
  for (const Target& t : all_targets()) {
    if (iequal(t.name, name)) return t;
  }
  return std::nullopt;
}

std::string target_names() {
  std::string s;
  for (const Target& t : all_targets()) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

}  // namespace frugal::quantize
