// W8A8: a linear layer y = x W^T run in INT8 on both sides, as production INT8 GEMMs run it.
//
//   weights      per output channel (row r) symmetric: w[r][k] ~= qw[r][k] * sw[r],
//                sw[r] = amax_k |w[r][k]| / 127, qw in [-127, 127]   (quantize_weights)
//   activations  per token (row t) symmetric and dynamic: x[t][k] ~= qa[t][k] * sa[t],
//                sa[t] = amax_k |x[t][k]| / 127, computed at run time  (quantize_activations)
//   product      acc[t][r] = sum_k qa[t][k] * qw[r][k] in int32, EXACT (see below), then an
//                epilogue y[t][r] = out(acc * sa[t] * sw[r] (+ bias[r])) in float, rounded once to
//                the output type (bf16 as INT8 kernels on GPUs emit it, or f32).
//
// Exactness of the accumulator. |qa|, |qw| <= 127 (-128 is never produced), so
// |acc| <= K * 127^2 = K * 16129, which stays below 2^31 - 1 for K <= kMaxExactK = 133144: no
// partial sum in any order can overflow, and integer addition is associative, so every kernel,
// whatever its tile or thread order, gets the same int32. Kernels may then differ only in the
// float epilogue (int8_gemm.h). Converting acc to float is exact for |acc| <= 2^24 (K <= 1040 in
// the worst case); above that the conversion rounds, identically in every kernel (one
// round-to-nearest int->float conversion of the same integer).
#pragma once

#include <cstdint>
#include <vector>

namespace frugal::quant::w8a8 {

inline constexpr int kQMax = 127;
inline constexpr int64_t kMaxExactK = 2147483647LL / (int64_t{kQMax} * kQMax);  // 133144

// True when K-long int8 dot products cannot overflow an int32 accumulator.
constexpr bool accumulator_fits(int64_t k) { return k >= 0 && k <= kMaxExactK; }

enum class OutputType : uint8_t {
  kF32 = 0,
  kBF16 = 1,  // round to nearest even, as __float2bfloat16_rn
};
const char* output_type_name(OutputType t);

// v rounded to the output type (and back to float, which is exact).
float round_to_output(float v, OutputType t);

// How many representable values of the output type lie between a and b (0: same value, 1:
// neighbours), counted on the ordered bit patterns, so it is right across binades and signs
// (+0 and -0 count as one value). a and b must already be values of that type.
int64_t spacings_apart(float a, float b, OutputType t);

struct Int8Weights {
  int64_t rows = 0;          // output channels
  int64_t cols = 0;          // K
  std::vector<int8_t> q;     // [rows][cols]
  std::vector<float> scale;  // [rows]; rows of zeros get scale 1
};

// Per-output-channel symmetric INT8 of a float matrix [rows][cols]: scale = amax / 127,
// q = clamp(round_half_even(w / scale), -127, 127).
Int8Weights quantize_weights(const float* w, int64_t rows, int64_t cols);

// w as the int8 tensor stands for it: q * scale, [rows][cols].
std::vector<float> dequantize_weights(const Int8Weights& w);

struct Int8Activations {
  int64_t n = 0;             // tokens
  int64_t cols = 0;          // K
  std::vector<int8_t> q;     // [n][cols]
  std::vector<float> scale;  // [n]; all-zero tokens get scale 1
};

// Per-token dynamic INT8 of x [n][cols] into `out` (resized, no allocation once large enough).
// One function, used by every kernel: the operands two kernels see are identical by construction.
void quantize_activations(const float* x, int64_t n, int64_t cols, Int8Activations& out);

// The exact accumulator, in int64 (for the reference and checks).
int64_t dot_exact(const int8_t* a, const int8_t* w, int64_t k);

// The oracle: exact accumulators (int64), epilogue in float64, rounded once to float and then to
// the output type. y [a.n][w.rows]. Both kernels are compared with it (never with each other) in
// the kernel tests.
void gemm_reference(const Int8Activations& a, const Int8Weights& w, const float* bias, OutputType out, float* y);

}  // namespace frugal::quant::w8a8
