#include "frugal/kv/kv_quant.h"

#include <algorithm>
#include <cmath>

#include "frugal/core/half.h"

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
  return error(ErrorCode::kInvalidArgument, "'{}' is not none, int8, int4 or hyquant", name);
}

const char* kv_quant_name(KvQuant q) {
  switch (q) {
    case KvQuant::kNone: return "none";
    case KvQuant::kInt8: return "int8";
    case KvQuant::kInt4: return "int4";
    case KvQuant::kHyQuant: return "hyquant";
  }
  return "?";
}

int kv_quant_bits(KvQuant q) {
  switch (q) {
    case KvQuant::kNone: return 0;
    case KvQuant::kInt8: return 8;
    case KvQuant::kInt4:
    case KvQuant::kHyQuant: return 4;
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

}  // namespace frugal
