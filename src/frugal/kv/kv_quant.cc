#include "frugal/kv/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "frugal/core/half.h"
#include "frugal/quant/fp4_codes.h"
#include "frugal/quant/hbq.h"

namespace frugal {
namespace {

// The FP16 value just below h (toward -inf).
uint16_t fp16_next_down(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0x8001;  // +-0 -> smallest negative subnormal
  return (h & 0x8000) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h - 1);
}
uint16_t fp16_next_up(uint16_t h) {
  if ((h & 0x7fff) == 0) return 0x0001;
  return (h & 0x8000) ? static_cast<uint16_t>(h - 1) : static_cast<uint16_t>(h + 1);
}

struct Grid {
  uint16_t step_h, min_h;
  float step, min, inv;
};

// Min rounded down and step rounded up to FP16 so that [min, min + qmax * step] covers [lo, hi].
Grid make_grid(float lo, float hi, int qmax) {
  Grid g;
  g.min_h = f32_to_fp16(lo);
  if (fp16_to_f32(g.min_h) > lo) g.min_h = fp16_next_down(g.min_h);
  g.min = fp16_to_f32(g.min_h);
  g.step_h = f32_to_fp16((hi - g.min) / static_cast<float>(qmax));
  if (g.step_h & 0x8000) g.step_h = 0;
  while (g.min + static_cast<float>(qmax) * fp16_to_f32(g.step_h) < hi) g.step_h = fp16_next_up(g.step_h);
  g.step = fp16_to_f32(g.step_h);
  g.inv = g.step > 0 ? 1.f / g.step : 0.f;
  return g;
}

int encode(float x, const Grid& g, int qmax) {
  const int c = static_cast<int>(std::lrint((x - g.min) * g.inv));
  return std::clamp(c, 0, qmax);
}

void put_code(uint8_t* codes, int i, int bits, int c) {
  if (bits == 8) {
    codes[i] = static_cast<uint8_t>(c);
  } else if (i & 1) {
    codes[i >> 1] = static_cast<uint8_t>((codes[i >> 1] & 0x0f) | (c << 4));
  } else {
    codes[i >> 1] = static_cast<uint8_t>((codes[i >> 1] & 0xf0) | c);
  }
}

int get_code(const uint8_t* codes, int i, int bits) {
  if (bits == 8) return codes[i];
  return (i & 1) ? codes[i >> 1] >> 4 : codes[i >> 1] & 0x0f;
}

}  // namespace

Result<KvQuant> parse_kv_quant(const std::string& name) {
  if (name == "none" || name.empty()) return KvQuant::kNone;
  if (name == "int8") return KvQuant::kInt8;
  if (name == "int4") return KvQuant::kInt4;
  if (name == "hyquant") return KvQuant::kHyQuant;
  if (name == "hbq") return KvQuant::kHbq;
  return error(ErrorCode::kInvalidArgument, "'{}' is not none, int8, int4, hyquant or hbq", name);
}

const char* kv_quant_name(KvQuant q) {
  switch (q) {
    case KvQuant::kNone: return "none";
    case KvQuant::kInt8: return "int8";
    case KvQuant::kInt4: return "int4";
    case KvQuant::kHyQuant: return "hyquant";
    case KvQuant::kHbq: return "hbq";
  }
  return "?";
}

int kv_quant_bits(KvQuant q) {
  switch (q) {
    case KvQuant::kNone: return 0;
    case KvQuant::kInt8: return 8;
    case KvQuant::kInt4:
    case KvQuant::kHyQuant:
    case KvQuant::kHbq: return 4;
  }
  return 0;
}

void kv_quantize_key_group(const float* src, int64_t src_stride, int n, int head_dim, int bits, uint8_t* codes,
                           int64_t code_stride, uint16_t* params) {
  const int qmax = (1 << bits) - 1;
  for (int c = 0; c < head_dim; ++c) {
    float lo = src[c], hi = src[c];
    for (int t = 1; t < n; ++t) {
      lo = std::min(lo, src[t * src_stride + c]);
      hi = std::max(hi, src[t * src_stride + c]);
    }
    const Grid g = make_grid(lo, hi, qmax);
    params[2 * c] = g.step_h;
    params[2 * c + 1] = g.min_h;
    for (int t = 0; t < n; ++t) put_code(codes + t * code_stride, c, bits, encode(src[t * src_stride + c], g, qmax));
  }
}

void kv_dequantize_key_row(const uint8_t* codes, const uint16_t* params, int head_dim, int bits, float* out) {
  for (int c = 0; c < head_dim; ++c) {
    out[c] = fp16_to_f32(params[2 * c + 1]) + static_cast<float>(get_code(codes, c, bits)) * fp16_to_f32(params[2 * c]);
  }
}

void kv_quantize_value_row(const float* src, int head_dim, int bits, uint8_t* codes, uint16_t* params) {
  const int qmax = (1 << bits) - 1;
  for (int g0 = 0; g0 < head_dim; g0 += kKvGroup) {
    const int e = std::min(head_dim, g0 + kKvGroup);
    float lo = src[g0], hi = src[g0];
    for (int c = g0 + 1; c < e; ++c) {
      lo = std::min(lo, src[c]);
      hi = std::max(hi, src[c]);
    }
    const Grid g = make_grid(lo, hi, qmax);
    uint16_t* p = params + 2 * (g0 / kKvGroup);
    p[0] = g.step_h;
    p[1] = g.min_h;
    for (int c = g0; c < e; ++c) put_code(codes, c, bits, encode(src[c], g, qmax));
  }
}

void kv_dequantize_value_row(const uint8_t* codes, const uint16_t* params, int head_dim, int bits, float* out) {
  for (int c = 0; c < head_dim; ++c) {
    const uint16_t* p = params + 2 * (c / kKvGroup);
    out[c] = fp16_to_f32(p[1]) + static_cast<float>(get_code(codes, c, bits)) * fp16_to_f32(p[0]);
  }
}

namespace {

// SIG_1 in eighths (hbq.h): 8, 12, 16, 20.
const int32_t* sig1_eighths() { return quant::kHbqAlphaEighths[static_cast<int>(quant::HbqAlphaSet::kSig1)]; }

// The smallest UE5M3 code whose value is >= v (v > 0), saturating at 0xFF (quant::ue5m3_ceil,
// kept here so the cache does not link the weight quantizers).
int ue5m3_ceil_code(float v) {
  const float* begin = quant::kUE5M3Values.v + 1;
  const float* end = quant::kUE5M3Values.v + 256;
  const float* it = std::lower_bound(begin, end, v);
  return it == end ? 255 : static_cast<int>(it - quant::kUE5M3Values.v);
}

float hbq_micro_error(const float* x, float d) {
  float err = 0.f;
  for (int j = 0; j < kKvHbqMicro; ++j) {
    const float diff = x[j] - d * quant::e2m1_to_f32(quant::e2m1_round_even(x[j] / d));
    err += diff * diff;
  }
  return err;
}

}  // namespace

int kv_hbq_block(int head_dim) {
  if (head_dim <= 0 || head_dim % kKvHbqMicro != 0) return 0;
  if (head_dim <= 128) return head_dim;
  if (head_dim % 128 == 0) return 128;
  return head_dim % 64 == 0 ? 64 : 0;
}

int kv_hbq_param_words(int head_dim) {
  const int l1 = kv_hbq_block(head_dim);
  return l1 > 0 ? head_dim / l1 * kv_hbq_block_words(l1) : 0;
}

void kv_hbq_quantize_row(const float* src, int head_dim, uint8_t* codes, uint16_t* params) {
  const int l1 = kv_hbq_block(head_dim), words = kv_hbq_block_words(l1), micros = l1 / kKvHbqMicro;
  const int32_t* alpha = sig1_eighths();
  std::fill(codes, codes + head_dim / 2, uint8_t{0});
  for (int b = 0; b < head_dim / l1; ++b) {
    const float* x = src + b * l1;
    uint16_t* p = params + b * words;
    std::fill(p, p + words, uint16_t{0});
    float amax = 0.f;
    for (int j = 0; j < l1; ++j) amax = std::max(amax, std::fabs(x[j]));
    if (!(amax > 0.f)) continue;  // scale code 0: every element decodes to 0
    // s0 lets nothing clip at alpha = 2.5; the code below may saturate the largest element for
    // less error on the rest. Two candidates rather than the weights' four: this runs for every
    // token of every layer and head at decode time.
    const int s0 = ue5m3_ceil_code(amax / (6.f * 2.5f));
    float best_err = std::numeric_limits<float>::infinity();
    int best_s = s0;
    uint8_t best_c[128 / kKvHbqMicro] = {};
    for (int s = s0; s >= std::max(1, s0 - 1); --s) {
      const float sv = quant::ue5m3_to_f32(static_cast<uint8_t>(s));
      float total = 0.f;
      uint8_t c_here[128 / kKvHbqMicro];
      for (int m = 0; m < micros; ++m) {
        float best_m = std::numeric_limits<float>::infinity();
        c_here[m] = 0;
        for (int c = 0; c < 4; ++c) {
          const float e = hbq_micro_error(x + m * kKvHbqMicro, sv * static_cast<float>(alpha[c]) * 0.125f);
          if (e < best_m) {
            best_m = e;
            c_here[m] = static_cast<uint8_t>(c);
          }
        }
        total += best_m;
      }
      if (total < best_err) {  // ties keep s0
        best_err = total;
        best_s = s;
        std::copy(c_here, c_here + micros, best_c);
      }
    }
    p[0] = static_cast<uint16_t>(best_s);
    const float sv = quant::ue5m3_to_f32(static_cast<uint8_t>(best_s));
    for (int m = 0; m < micros; ++m) {
      p[1 + m / 8] = static_cast<uint16_t>(p[1 + m / 8] | (best_c[m] << (2 * (m % 8))));
      const float d = sv * static_cast<float>(alpha[best_c[m]]) * 0.125f;
      for (int j = 0; j < kKvHbqMicro; ++j) {
        const int ch = b * l1 + m * kKvHbqMicro + j;
        put_code(codes, ch, 4, quant::e2m1_round_even(x[m * kKvHbqMicro + j] / d));
      }
    }
  }
}

float kv_hbq_half_step(const uint16_t* params, int head_dim, int m) {
  const int l1 = kv_hbq_block(head_dim), words = kv_hbq_block_words(l1), micros = l1 / kKvHbqMicro;
  const uint16_t* p = params + (m / micros) * words;
  const int mm = m % micros;
  const int c = (p[1 + mm / 8] >> (2 * (mm % 8))) & 3;
  // (scale / 16) * alpha_eighths: a 4-bit significand times a 5-bit integer, exact.
  return quant::ue5m3_to_f32(static_cast<uint8_t>(p[0] & 0xFF)) * 0.0625f * static_cast<float>(sig1_eighths()[c]);
}

void kv_hbq_dequantize_row(const uint8_t* codes, const uint16_t* params, int head_dim, float* out) {
  for (int m = 0; m < head_dim / kKvHbqMicro; ++m) {
    const float hs = kv_hbq_half_step(params, head_dim, m);
    for (int j = 0; j < kKvHbqMicro; ++j) {
      const int ch = m * kKvHbqMicro + j;
      out[ch] = hs * static_cast<float>(quant::kE2M1Doubled[get_code(codes, ch, 4)]);
    }
  }
}

}  // namespace frugal
