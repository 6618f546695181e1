#include "frugal/quant/type_traits.h"

#include "frugal/quant/reference.h"

namespace frugal {
namespace {

using namespace quant;  // NOLINT(google-build-using-namespace): the table names every kernel

TypeTraits row(DType type, DType vec_dot_type, bool quantized, ToFloatFn to_float_ref,
               FromFloatFn from_float_ref, VecDotFn vec_dot_ref) {
  TypeTraits t;
  t.type = type;
  t.vec_dot_type = vec_dot_type;
  t.quantized = quantized;
  t.to_float_ref = to_float_ref;
  t.from_float_ref = from_float_ref;
  t.vec_dot_ref = vec_dot_ref;
  t.to_float = to_float_ref;
  t.from_float = from_float_ref;
  t.vec_dot = vec_dot_ref;
  return t;
}

struct Table {
  std::vector<TypeTraits> rows;
  std::vector<const TypeTraits*> pointers;

  Table() {
    rows = {
        row(DType::kF32, DType::kF32, false, dequantize_f32_ref, quantize_f32_ref, vec_dot_f32_ref),
        row(DType::kF16, DType::kF16, false, dequantize_f16_ref, quantize_f16_ref, vec_dot_f16_ref),
        row(DType::kBF16, DType::kBF16, false, dequantize_bf16_ref, quantize_bf16_ref,
            vec_dot_bf16_ref),
        row(DType::kQ8_0, DType::kQ8_0, true, dequantize_q8_0_ref, quantize_q8_0_ref,
            vec_dot_q8_0_q8_0_ref),
        row(DType::kQ8_1, DType::kQ8_1, true, dequantize_q8_1_ref, quantize_q8_1_ref, nullptr),
        row(DType::kQ8_K, DType::kQ8_K, true, dequantize_q8_k_ref, quantize_q8_k_ref, nullptr),
        row(DType::kQ4_0, DType::kQ8_0, true, dequantize_q4_0_ref, quantize_q4_0_ref,
            vec_dot_q4_0_q8_0_ref),
        row(DType::kQ4_1, DType::kQ8_1, true, dequantize_q4_1_ref, quantize_q4_1_ref,
            vec_dot_q4_1_q8_1_ref),
        row(DType::kQ5_0, DType::kQ8_0, true, dequantize_q5_0_ref, quantize_q5_0_ref,
            vec_dot_q5_0_q8_0_ref),
        row(DType::kQ5_1, DType::kQ8_1, true, dequantize_q5_1_ref, quantize_q5_1_ref,
            vec_dot_q5_1_q8_1_ref),
        row(DType::kQ2_K, DType::kQ8_K, true, dequantize_q2_k_ref, quantize_q2_k_ref,
            vec_dot_q2_k_q8_k_ref),
        row(DType::kQ3_K, DType::kQ8_K, true, dequantize_q3_k_ref, quantize_q3_k_ref,
            vec_dot_q3_k_q8_k_ref),
        row(DType::kQ4_K, DType::kQ8_K, true, dequantize_q4_k_ref, quantize_q4_k_ref,
            vec_dot_q4_k_q8_k_ref),
        row(DType::kQ5_K, DType::kQ8_K, true, dequantize_q5_k_ref, quantize_q5_k_ref,
            vec_dot_q5_k_q8_k_ref),
        row(DType::kQ6_K, DType::kQ8_K, true, dequantize_q6_k_ref, quantize_q6_k_ref,
            vec_dot_q6_k_q8_k_ref),
        row(DType::kIQ4_NL, DType::kQ8_0, true, dequantize_iq4_nl_ref, quantize_iq4_nl_ref,
            vec_dot_iq4_nl_q8_0_ref),
    };
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

const char* simd_target_name() { return "scalar"; }

}  // namespace frugal
