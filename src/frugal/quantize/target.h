// The names `frugal quantize` accepts for its TYPE argument: a plain tensor type (every tensor
// that is quantized gets it) or one of llama-quantize's mixes (Q4_K_M, Q3_K_S, ...: a base type
// plus per-tensor rules, mix_rules.h). Each carries the number llama.cpp stores in
// general.file_type, so a file we write says what it is the way llama-quantize's files do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/dtype.h"

namespace frugal::quantize {

// llama.cpp's llama_ftype numbers (general.file_type): frozen, written to disk.
enum class FileType : uint32_t {
  kAllF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kQ2_K_S = 21,
  kIQ4_NL = 25,
  kBF16 = 32,
  // Not in llama.cpp build 4748: MXFP4 is the number later llama.cpp gives MXFP4_MOE; NVFP4's
  // is ours, the next free one.
  kMXFP4 = 38,
  kNVFP4 = 39,
  // frugal's own, as the HBQ tensor type ids (core/dtype.h); llama.cpp knows neither.
  kHBQ_A = 1024,
  kHBQ_E = 1025,
  kFLUXBIN = 1026,         // frugal's own (quant/fluxbin.h): FluxBin, every quantized tensor binary
  kFLUXBIN_HYBRID = 1027,  // frugal's own: FluxBin with 8 salient columns per 128 kept at int4
};

struct Target {
  std::string_view name;  // as typed: "Q4_K_M"
  FileType file_type;
  DType base;             // the type of every quantized tensor no rule changes
  std::string_view description;
};

// Case-insensitive; accepts llama-quantize's aliases (Q4_K = Q4_K_M, Q5_K = Q5_K_M,
// Q3_K = Q3_K_M). nullopt for anything else.
std::optional<Target> find_target(std::string_view name);
const std::vector<Target>& all_targets();
// "F32, F16, ..." for error messages and --help.
std::string target_names();

}  // namespace frugal::quantize
