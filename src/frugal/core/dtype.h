// Tensor element types. Numbers are ggml's type ids (frugal's own from 1024), as stored in GGUF
// files: frozen.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace frugal {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,  // OCP MX FP4: E2M1 codes, one E8M0 scale per 32 (quant/mxfp4.cc)
  kNVFP4 = 40,  // NVIDIA FP4: E2M1 codes, UE4M3 scale per 16, F32 scale per tensor (quant/nvfp4.cc)
  // Ids from 1024 on are frugal's own, not ggml's: llama.cpp cannot read tensors of these types.
  kHBQ_A = 1024,  // HBQ-A: E2M1 codes, UE5M3 scale per 128, 2-bit significand scale per 8 (quant/hbq.cc)
  kHBQ_E = 1025,  // HBQ-E: as HBQ-A with the 2-bit significand scale per 32 (quant/hbq.cc)
  kFLUXBIN = 1026,  // frugal's own, llama.cpp cannot read it: two sign planes + row scales per 128 (quant/fluxbin.h)
};

// Layout facts every module needs (the GGUF reader validates sizes with them); kernels live in
// quant/. Returns nullopt for ids frugal does not know.
struct DTypeLayout {
  DType type;
  std::string_view name;  // ggml's spelling: "f32", "q4_K", ...
  int64_t block_size;     // elements per block
  int64_t block_bytes;    // bytes per block
};

std::optional<DTypeLayout> dtype_layout(uint32_t ggml_type_id);
const DTypeLayout& dtype_layout(DType type);  // type must be known
std::string_view dtype_name(DType type);
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive: "Q4_K", "q4_k"

// Bytes of a row of n elements; n must be a multiple of the block size.
inline int64_t row_bytes(DType type, int64_t n) {
  const DTypeLayout& l = dtype_layout(type);
  return n / l.block_size * l.block_bytes;
}

}  // namespace frugal
