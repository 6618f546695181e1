#include "frugal/quant/type_traits.h"

#include "frugal/quant/hbq.h"
#include "frugal/quant/reference.h"
#include "frugal/quant/simd_kernels.h"

namespace frugal {
namespace {

using namespace quant;  // NOLINT(google-build-using-namespace): the table names every kernel

// Fast kernels of one row; nullptr members keep the reference versions.
struct Fast {
  ToFloatFn to_float = nullptr;
  FromFloatFn from_float = nullptr;
  VecDotFn vec_dot = nullptr;
  GemmTileFn gemm_tile = nullptr;
  int tile_rows = 1;
  int tile_cols = 1;
};

TypeTraits row(DType type, DType vec_dot_type, bool quantized, ToFloatFn to_float_ref,
               FromFloatFn from_float_ref, VecDotFn vec_dot_ref, const Fast& fast) {
  TypeTraits t;
  t.type = type;
  t.vec_dot_type = vec_dot_type;
  t.quantized = quantized;
  t.to_float_ref = to_float_ref;
  t.from_float_ref = from_float_ref;
  t.vec_dot_ref = vec_dot_ref;
  t.to_float = fast.to_float ? fast.to_float : to_float_ref;
  t.from_float = fast.from_float ? fast.from_float : from_float_ref;
  t.vec_dot = fast.vec_dot ? fast.vec_dot : vec_dot_ref;
  t.gemm_tile = fast.gemm_tile;
  t.tile_rows = fast.gemm_tile ? fast.tile_rows : 1;
  t.tile_cols = fast.gemm_tile ? fast.tile_cols : 1;
  return t;
}

// Types whose model-file bytes ignore an importance matrix: their row reference, row by row.
template <FromFloatFn kRef>
void rows_from_reference(const float* src, void* dst, int64_t nrows, int64_t n_per_row, const float*) {
  kRef(src, dst, nrows * n_per_row);
}

QuantizeRowsFn model_file_quantizer(DType type) {
  switch (type) {
    case DType::kF32: return rows_from_reference<quantize_f32_ref>;
    case DType::kF16: return rows_from_reference<quantize_f16_ref>;
    case DType::kBF16: return rows_from_reference<quantize_bf16_ref>;
    case DType::kQ8_0: return rows_from_reference<quantize_q8_0_ref>;
    case DType::kQ4_0: return quantize_rows_q4_0;
    case DType::kQ4_1: return quantize_rows_q4_1;
    case DType::kQ5_0: return quantize_rows_q5_0;
    case DType::kQ5_1: return quantize_rows_q5_1;
    case DType::kQ2_K: return quantize_rows_q2_k;
    case DType::kQ3_K: return quantize_rows_q3_k;
    case DType::kQ4_K: return quantize_rows_q4_k;
    case DType::kQ5_K: return quantize_rows_q5_k;
    case DType::kQ6_K: return quantize_rows_q6_k;
    case DType::kIQ4_NL: return quantize_rows_iq4_nl;
    case DType::kMXFP4: return rows_from_reference<quantize_mxfp4_ref>;
    // Row by row with a global scale of 1; model files go through quantize_rows_nvfp4_scaled
    // with the tensor's global scale (quantize/model_quantizer.cc).
    case DType::kNVFP4: return rows_from_reference<quantize_nvfp4_ref>;
    case DType::kHBQ_A: return quantize_rows_hbq_a_sig;
    case DType::kHBQ_E: return quantize_rows_hbq_e_sig;
    default: return nullptr;
  }
}

struct Table {
  std::vector<TypeTraits> rows;
  std::vector<const TypeTraits*> pointers;

  Table() {
    using namespace fast;  // NOLINT(google-build-using-namespace)
    const int fr = kFloatTileRows;
    const int fc = kFloatTileCols;
    const int br = kBlockTileRows;
    const int bc = kBlockTileCols;
    const int kr = kKTileRows;
    const int kc = kKTileCols;
    rows = {
        row(DType::kF32, DType::kF32, false, dequantize_f32_ref, quantize_f32_ref, vec_dot_f32_ref,
            Fast{nullptr, nullptr, vec_dot_f32, gemm_f32, fr, fc}),
        row(DType::kF16, DType::kF16, false, dequantize_f16_ref, quantize_f16_ref, vec_dot_f16_ref,
            Fast{to_float_f16, from_float_f16, vec_dot_f16, gemm_f16, fr, fc}),
        row(DType::kBF16, DType::kBF16, false, dequantize_bf16_ref, quantize_bf16_ref,
            vec_dot_bf16_ref,
            Fast{to_float_bf16, from_float_bf16, vec_dot_bf16, gemm_bf16, fr, fc}),
        row(DType::kQ8_0, DType::kQ8_0, true, dequantize_q8_0_ref, quantize_q8_0_ref,
            vec_dot_q8_0_q8_0_ref,
            Fast{to_float_q8_0, from_float_q8_0, vec_dot_q8_0, gemm_q8_0, br, bc}),
        row(DType::kQ8_1, DType::kQ8_1, true, dequantize_q8_1_ref, quantize_q8_1_ref, nullptr,
            Fast{to_float_q8_1, from_float_q8_1}),
        row(DType::kQ8_K, DType::kQ8_K, true, dequantize_q8_k_ref, quantize_q8_k_ref, nullptr,
            Fast{to_float_q8_k, from_float_q8_k}),
        row(DType::kQ4_0, DType::kQ8_0, true, dequantize_q4_0_ref, quantize_q4_0_ref,
            vec_dot_q4_0_q8_0_ref, Fast{to_float_q4_0, nullptr, vec_dot_q4_0, gemm_q4_0, br, bc}),
        row(DType::kQ4_1, DType::kQ8_1, true, dequantize_q4_1_ref, quantize_q4_1_ref,
            vec_dot_q4_1_q8_1_ref, Fast{to_float_q4_1, nullptr, vec_dot_q4_1, gemm_q4_1, br, bc}),
        row(DType::kQ5_0, DType::kQ8_0, true, dequantize_q5_0_ref, quantize_q5_0_ref,
            vec_dot_q5_0_q8_0_ref, Fast{to_float_q5_0, nullptr, vec_dot_q5_0, gemm_q5_0, br, bc}),
        row(DType::kQ5_1, DType::kQ8_1, true, dequantize_q5_1_ref, quantize_q5_1_ref,
            vec_dot_q5_1_q8_1_ref, Fast{to_float_q5_1, nullptr, vec_dot_q5_1, gemm_q5_1, br, bc}),
        row(DType::kQ2_K, DType::kQ8_K, true, dequantize_q2_k_ref, quantize_q2_k_ref,
            vec_dot_q2_k_q8_k_ref, Fast{to_float_q2_k, nullptr, vec_dot_q2_k, gemm_q2_k, kr, kc}),
        row(DType::kQ3_K, DType::kQ8_K, true, dequantize_q3_k_ref, quantize_q3_k_ref,
            vec_dot_q3_k_q8_k_ref, Fast{to_float_q3_k, nullptr, vec_dot_q3_k, gemm_q3_k, kr, kc}),
        row(DType::kQ4_K, DType::kQ8_K, true, dequantize_q4_k_ref, quantize_q4_k_ref,
            vec_dot_q4_k_q8_k_ref, Fast{to_float_q4_k, nullptr, vec_dot_q4_k, gemm_q4_k, kr, kc}),
        row(DType::kQ5_K, DType::kQ8_K, true, dequantize_q5_k_ref, quantize_q5_k_ref,
            vec_dot_q5_k_q8_k_ref, Fast{to_float_q5_k, nullptr, vec_dot_q5_k, gemm_q5_k, kr, kc}),
        row(DType::kQ6_K, DType::kQ8_K, true, dequantize_q6_k_ref, quantize_q6_k_ref,
            vec_dot_q6_k_q8_k_ref, Fast{to_float_q6_k, nullptr, vec_dot_q6_k, gemm_q6_k, kr, kc}),
        row(DType::kIQ4_NL, DType::kQ8_0, true, dequantize_iq4_nl_ref, quantize_iq4_nl_ref,
            vec_dot_iq4_nl_q8_0_ref,
            Fast{to_float_iq4_nl, nullptr, vec_dot_iq4_nl, gemm_iq4_nl, br, bc}),
        // FP4 formats: no gemm tile yet (batches of 8+ tokens dequantize and use the float GEMM).
        row(DType::kMXFP4, DType::kQ8_0, true, dequantize_mxfp4_ref, quantize_mxfp4_ref,
            vec_dot_mxfp4_q8_0_ref, Fast{to_float_mxfp4, nullptr, vec_dot_mxfp4}),
        row(DType::kNVFP4, DType::kQ8_0, true, dequantize_nvfp4_ref, quantize_nvfp4_ref,
            vec_dot_nvfp4_q8_0_ref, Fast{to_float_nvfp4, nullptr, vec_dot_nvfp4}),
        row(DType::kHBQ_A, DType::kQ8_0, true, dequantize_hbq_a_ref, quantize_hbq_a_ref,
            vec_dot_hbq_a_q8_0_ref, Fast{to_float_hbq_a, nullptr, vec_dot_hbq_a}),
        row(DType::kHBQ_E, DType::kQ8_0, true, dequantize_hbq_e_ref, quantize_hbq_e_ref,
            vec_dot_hbq_e_q8_0_ref, Fast{to_float_hbq_e, nullptr, vec_dot_hbq_e}),
    };
    for (TypeTraits& t : rows) t.quantize_rows = model_file_quantizer(t.type);
    for (const TypeTraits& t : rows) pointers.push_back(&t);
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const TypeTraits* type_traits(DType type) {
  for (const TypeTraits* t : table().pointers) {
    if (t->type == type) return t;
  }
  return nullptr;
}

const std::vector<const TypeTraits*>& all_type_traits() { return table().pointers; }

const char* simd_target_name() { return quant::fast::dispatched_target_name(); }

}  // namespace frugal
