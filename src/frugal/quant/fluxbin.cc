#include "frugal/quant/fluxbin.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>

#include "frugal/core/half.h"

namespace frugal::quant::fluxbin {
namespace {

float round_f16(float v) { return fp16_to_f32(f32_to_fp16(v)); }

// Least squares for two coefficients: minimise a11 x^2 + 2 a12 x y + a22 y^2 - 2 b1 x - 2 b2 y.
// A (near) singular system falls back to one coordinate-descent sweep from (x, y), which never
// increases the objective, so the caller's error stays non-increasing.
void solve2(double a11, double a12, double a22, double b1, double b2, float& x, float& y) {
  const double det = a11 * a22 - a12 * a12;
  if (a11 > 0 && a22 > 0 && det > 1e-9 * a11 * a22) {
    x = static_cast<float>((b1 * a22 - b2 * a12) / det);
    y = static_cast<float>((b2 * a11 - b1 * a12) / det);
    return;
  }
  if (a11 > 0) x = static_cast<float>((b1 - a12 * y) / a11);
  if (a22 > 0) y = static_cast<float>((b2 - a12 * x) / a22);
}

struct State {
  int64_t rows, cols, groups;
  std::vector<int8_t> b1, b2;  // rows x cols, +-1
  std::vector<float> r;        // rows x groups x 2
  std::vector<float> c;        // 2 x cols
  std::vector<float> h;        // cols: importance times the non-salient mask
  std::vector<uint8_t> salient_mask;  // cols

  float& rk(int64_t o, int64_t g, int k) { return r[(o * groups + g) * 2 + k]; }
};

double total_error(const State& s, const float* w) {
  double err = 0;
  for (int64_t o = 0; o < s.rows; ++o) {
    for (int64_t j = 0; j < s.cols; ++j) {
      if (s.h[j] == 0.f) continue;
      const int64_t g = j / kGroup;
      const float r1 = s.r[(o * s.groups + g) * 2], r2 = s.r[(o * s.groups + g) * 2 + 1];
      const double d = w[o * s.cols + j] - (s.b1[o * s.cols + j] * r1 * s.c[j] + s.b2[o * s.cols + j] * r2 * s.c[s.cols + j]);
      err += s.h[j] * d * d;
    }
  }
  return err;
}

void update_r(State& s, const float* w) {
  for (int64_t o = 0; o < s.rows; ++o) {
    for (int64_t g = 0; g < s.groups; ++g) {
      double a11 = 0, a12 = 0, a22 = 0, y1 = 0, y2 = 0;
      for (int64_t j = g * kGroup; j < (g + 1) * kGroup; ++j) {
        const double hj = s.h[j];
        if (hj == 0) continue;
        const double a = s.b1[o * s.cols + j] * s.c[j], b = s.b2[o * s.cols + j] * s.c[s.cols + j];
        const double x = w[o * s.cols + j];
        a11 += hj * a * a;
        a12 += hj * a * b;
        a22 += hj * b * b;
        y1 += hj * x * a;
        y2 += hj * x * b;
      }
      solve2(a11, a12, a22, y1, y2, s.rk(o, g, 0), s.rk(o, g, 1));
    }
  }
}

// Column scales: per column the weight h_j multiplies every term, so it drops out.
void update_c(State& s, const float* w) {
  std::vector<double> acc(5 * s.cols, 0.0);
  for (int64_t o = 0; o < s.rows; ++o) {
    for (int64_t j = 0; j < s.cols; ++j) {
      const int64_t g = j / kGroup;
      const double p = s.b1[o * s.cols + j] * s.rk(o, g, 0), q = s.b2[o * s.cols + j] * s.rk(o, g, 1);
      const double x = w[o * s.cols + j];
      double* a = &acc[5 * j];
      a[0] += p * p;
      a[1] += p * q;
      a[2] += q * q;
      a[3] += x * p;
      a[4] += x * q;
    }
  }
  for (int64_t j = 0; j < s.cols; ++j) {
    if (s.salient_mask[j]) continue;
    const double* a = &acc[5 * j];
    solve2(a[0], a[1], a[2], a[3], a[4], s.c[j], s.c[s.cols + j]);
  }
}

// Unit RMS per (group, basis) over the non-salient columns, the factor moved into r: the product
// is unchanged, and the scales stay in a range f16 holds well.
void normalise_c(State& s) {
  for (int64_t g = 0; g < s.groups; ++g) {
    for (int k = 0; k < 2; ++k) {
      double ss = 0;
      int n = 0;
      for (int64_t j = g * kGroup; j < (g + 1) * kGroup; ++j) {
        if (s.salient_mask[j]) continue;
        ss += static_cast<double>(s.c[k * s.cols + j]) * s.c[k * s.cols + j];
        ++n;
      }
      if (n == 0 || ss <= 0) continue;
      const float f = static_cast<float>(std::sqrt(ss / n));
      for (int64_t j = g * kGroup; j < (g + 1) * kGroup; ++j) s.c[k * s.cols + j] /= f;
      for (int64_t o = 0; o < s.rows; ++o) s.rk(o, g, k) *= f;
    }
  }
}

void update_signs(State& s, const float* w) {
  for (int64_t o = 0; o < s.rows; ++o) {
    for (int64_t j = 0; j < s.cols; ++j) {
      const int64_t g = j / kGroup;
      const float u = s.rk(o, g, 0) * s.c[j], v = s.rk(o, g, 1) * s.c[s.cols + j];
      const float x = w[o * s.cols + j];
      int8_t best1 = s.b1[o * s.cols + j], best2 = s.b2[o * s.cols + j];
      float best = std::fabs(x - (best1 * u + best2 * v));
      for (int8_t p1 : {int8_t{1}, int8_t{-1}}) {
        for (int8_t p2 : {int8_t{1}, int8_t{-1}}) {
          const float e = std::fabs(x - (p1 * u + p2 * v));
          if (e < best) {
            best = e;
            best1 = p1;
            best2 = p2;
          }
        }
      }
      s.b1[o * s.cols + j] = best1;
      s.b2[o * s.cols + j] = best2;
    }
  }
}

}  // namespace

std::string companion_name(const std::string& weight_name, const char* part) {
  constexpr std::string_view kSuffix = ".weight";
  std::string base = weight_name;
  if (base.size() > kSuffix.size() && base.ends_with(kSuffix)) base.resize(base.size() - kSuffix.size());
  return base + "." + part;
}

View view_of(const Matrix& m) {
  return View{m.rows, m.cols, m.salient, m.blocks.data(), m.col_scales.data(), m.salient_idx.data(),
              m.salient_vals.data()};
}

double bits_per_weight(int64_t rows, int64_t cols, int salient) {
  const int64_t groups = cols / kGroup;
  const double bytes = static_cast<double>(rows) * groups * (kBlockBytes + salient_row_bytes(salient)) +
                       2.0 * kBases * cols + static_cast<double>(groups) * salient;
  return bytes * 8.0 / (static_cast<double>(rows) * cols);
}

Result<Matrix> fit(const float* w, int64_t rows, int64_t cols, const FitOptions& opt, const char* name) {
  if (rows <= 0 || cols <= 0 || cols % kGroup != 0) {
    return error(ErrorCode::kInvalidArgument,
                 "FluxBin: tensor '{}' has {} columns (input dimension), which is not a positive multiple of {}",
                 name, cols, kGroup);
  }
  if (opt.salient < 0 || opt.salient > 32 || opt.salient % 2 != 0) {
    return error(ErrorCode::kInvalidArgument, "FluxBin: salient columns per group must be even and in 0..32, got {}",
                 opt.salient);
  }
  State s;
  s.rows = rows;
  s.cols = cols;
  s.groups = cols / kGroup;
  s.b1.assign(rows * cols, 1);
  s.b2.assign(rows * cols, 1);
  s.r.assign(rows * s.groups * 2, 0.f);
  s.c.assign(2 * cols, 1.f);
  s.h.assign(cols, 1.f);
  s.salient_mask.assign(cols, 0);
  if (opt.importance != nullptr) {
    for (int64_t j = 0; j < cols; ++j) {
      const float v = opt.importance[j];
      s.h[j] = std::isfinite(v) && v > 0 ? v : 0.f;
    }
  }

  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.salient = opt.salient;
  if (opt.salient > 0) {
    // Saliency of column j under a diagonal H: sum_o W[o,j]^2 * H_jj.
    std::vector<double> sal(cols, 0.0);
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t j = 0; j < cols; ++j) sal[j] += static_cast<double>(w[o * cols + j]) * w[o * cols + j];
    }
    m.salient_idx.resize(s.groups * opt.salient);
    std::vector<int> idx(kGroup);
    for (int64_t g = 0; g < s.groups; ++g) {
      std::iota(idx.begin(), idx.end(), 0);
      auto key = [&](int j) { return sal[g * kGroup + j] * (opt.importance != nullptr ? s.h[g * kGroup + j] : 1.0); };
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key(a) > key(b); });
      std::sort(idx.begin(), idx.begin() + opt.salient);
      for (int t = 0; t < opt.salient; ++t) {
        m.salient_idx[g * opt.salient + t] = static_cast<uint8_t>(idx[t]);
        s.salient_mask[g * kGroup + idx[t]] = 1;
        s.h[g * kGroup + idx[t]] = 0.f;
        s.c[g * kGroup + idx[t]] = 0.f;
        s.c[cols + g * kGroup + idx[t]] = 0.f;
      }
    }
  }
  // A column of zero importance (never-seen input) still gets fitted, with the smallest weight
  // of its group, so the stored values are not arbitrary.
  for (int64_t g = 0; g < s.groups; ++g) {
    float mn = 0.f;
    for (int64_t j = g * kGroup; j < (g + 1) * kGroup; ++j) {
      if (s.h[j] > 0 && (mn == 0.f || s.h[j] < mn)) mn = s.h[j];
    }
    for (int64_t j = g * kGroup; j < (g + 1) * kGroup; ++j) {
      if (s.h[j] == 0.f && !s.salient_mask[j]) s.h[j] = mn > 0 ? mn : 1.f;
    }
  }

  // Greedy residual initialisation: B_k = sign(residual), r_k = mean |residual|, c_k = 1.
  std::vector<float> res(kGroup);
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t g = 0; g < s.groups; ++g) {
      const int64_t j0 = g * kGroup;
      std::copy(w + o * cols + j0, w + o * cols + j0 + kGroup, res.begin());
      for (int k = 0; k < 2; ++k) {
        double sum = 0;
        int n = 0;
        for (int j = 0; j < kGroup; ++j) {
          if (s.salient_mask[j0 + j]) continue;
          sum += std::fabs(res[j]);
          ++n;
        }
        const float rk = n > 0 ? static_cast<float>(sum / n) : 0.f;
        s.rk(o, g, k) = rk;
        std::vector<int8_t>& b = k == 0 ? s.b1 : s.b2;
        for (int j = 0; j < kGroup; ++j) {
          const int8_t sign = res[j] < 0 ? -1 : 1;
          b[o * cols + j0 + j] = sign;
          res[j] -= sign * rk;
        }
      }
    }
  }

  m.error_history.push_back(total_error(s, w));
  int stalled = 0;
  for (int it = 0; it < opt.max_iterations && stalled < opt.patience; ++it) {
    update_r(s, w);
    update_c(s, w);
    normalise_c(s);
    update_signs(s, w);
    const double prev = m.error_history.back();
    const double cur = total_error(s, w);
    m.error_history.push_back(cur);
    stalled = (prev <= 0 || (prev - cur) <= opt.min_improvement * prev) ? stalled + 1 : 0;
  }

  // Store: c rounded to f16 first, r refitted to the rounded c and rounded, then every sign pair
  // chosen again against the stored values.
  for (float& v : s.c) v = round_f16(v);
  update_r(s, w);
  for (float& v : s.r) v = round_f16(v);
  update_signs(s, w);

  m.col_scales.resize(2 * cols);
  for (int64_t i = 0; i < 2 * cols; ++i) m.col_scales[i] = f32_to_fp16(s.c[i]);
  m.blocks.assign(rows * s.groups * kBlockBytes, 0);
  for (int64_t o = 0; o < rows; ++o) {
    for (int64_t g = 0; g < s.groups; ++g) {
      uint8_t* blk = &m.blocks[(o * s.groups + g) * kBlockBytes];
      for (int k = 0; k < 2; ++k) {
        const std::vector<int8_t>& b = k == 0 ? s.b1 : s.b2;
        for (int j = 0; j < kGroup; ++j) {
          if (b[o * cols + g * kGroup + j] > 0) blk[k * kSignBytes + j / 8] |= static_cast<uint8_t>(1u << (j % 8));
        }
        const uint16_t rh = f32_to_fp16(s.rk(o, g, k));
        std::memcpy(blk + 2 * kSignBytes + 2 * k, &rh, 2);
      }
    }
  }
  if (opt.salient > 0) {
    const int64_t srb = salient_row_bytes(opt.salient);
    m.salient_vals.assign(rows * s.groups * srb, 0);
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t g = 0; g < s.groups; ++g) {
        uint8_t* p = &m.salient_vals[(o * s.groups + g) * srb];
        const uint8_t* idx = &m.salient_idx[g * opt.salient];
        float amax = 0.f;
        for (int t = 0; t < opt.salient; ++t) amax = std::max(amax, std::fabs(w[o * cols + g * kGroup + idx[t]]));
        const uint16_t sh = f32_to_fp16(amax / 7.f);
        const float sc = fp16_to_f32(sh);
        std::memcpy(p, &sh, 2);
        for (int t = 0; t < opt.salient; ++t) {
          int q = 0;
          if (sc > 0) q = static_cast<int>(std::lround(w[o * cols + g * kGroup + idx[t]] / sc));
          q = std::clamp(q, -7, 7) + 8;
          p[2 + t / 2] |= static_cast<uint8_t>(q << (4 * (t % 2)));
        }
      }
    }
  }
  return m;
}

void dequantize_row(const View& v, int64_t o, float* out) {
  const int64_t groups = v.cols / kGroup;
  const int64_t srb = salient_row_bytes(v.salient);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* blk = v.blocks + (o * groups + g) * kBlockBytes;
    float* dst = out + g * kGroup;
    for (int j = 0; j < kGroup; ++j) dst[j] = 0.f;
    for (int k = 0; k < 2; ++k) {
      uint16_t rh;
      std::memcpy(&rh, blk + 2 * kSignBytes + 2 * k, 2);
      const float r = fp16_to_f32(rh);
      const uint16_t* c = v.col_scales + k * v.cols + g * kGroup;
      for (int j = 0; j < kGroup; ++j) {
        const float sign = (blk[k * kSignBytes + j / 8] >> (j % 8)) & 1 ? 1.f : -1.f;
        dst[j] += sign * r * fp16_to_f32(c[j]);
      }
    }
    if (v.salient > 0) {
      const uint8_t* p = v.salient_vals + (o * groups + g) * srb;
      uint16_t sh;
      std::memcpy(&sh, p, 2);
      const float sc = fp16_to_f32(sh);
      for (int t = 0; t < v.salient; ++t) {
        const int q = ((p[2 + t / 2] >> (4 * (t % 2))) & 15) - 8;
        dst[v.salient_idx[g * v.salient + t]] += sc * static_cast<float>(q);
      }
    }
  }
}

void gemv_reference(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end) {
  std::vector<float> row(v.cols);
  for (int64_t o = row_begin; o < row_end; ++o) {
    dequantize_row(v, o, row.data());
    double acc = 0;
    for (int64_t j = 0; j < v.cols; ++j) acc += static_cast<double>(row[j]) * x[j];
    y[o] = static_cast<float>(acc);
  }
}

void gemv_lut(const View& v, const float* x, float* y, int64_t row_begin, int64_t row_end,
              std::vector<float>& scratch) {
  constexpr int kChunks = kSignBytes;  // 16 chunks of 8 columns per group
  scratch.resize(2 * kChunks * 256);
  const int64_t groups = v.cols / kGroup;
  const int64_t srb = salient_row_bytes(v.salient);
  for (int64_t o = row_begin; o < row_end; ++o) y[o] = 0.f;
  float u[kGroup];
  float xs[32];
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * kGroup;
    for (int k = 0; k < 2; ++k) {
      const uint16_t* c = v.col_scales + k * v.cols + g * kGroup;
      for (int j = 0; j < kGroup; ++j) u[j] = fp16_to_f32(c[j]) * xg[j];
      for (int i = 0; i < kChunks; ++i) {
        float* t = scratch.data() + (k * kChunks + i) * 256;
        const float* ui = u + 8 * i;
        float neg = 0.f;
        for (int b = 0; b < 8; ++b) neg -= ui[b];
        t[0] = neg;
        // Entry m differs from m without its lowest set bit by that column turning from - to +.
        for (int mm = 1; mm < 256; ++mm) t[mm] = t[mm & (mm - 1)] + 2.f * ui[std::countr_zero(static_cast<unsigned>(mm))];
      }
    }
    const float* t1 = scratch.data();
    const float* t2 = scratch.data() + kChunks * 256;
    for (int t = 0; t < v.salient; ++t) xs[t] = xg[v.salient_idx[g * v.salient + t]];
    for (int64_t o = row_begin; o < row_end; ++o) {
      const uint8_t* blk = v.blocks + (o * groups + g) * kBlockBytes;
      // Four independent sums per basis: one chain of dependent adds would wait on every
      // table load in turn.
      float p1[4] = {0.f, 0.f, 0.f, 0.f}, p2[4] = {0.f, 0.f, 0.f, 0.f};
      for (int i = 0; i < kChunks; i += 4) {
        for (int q = 0; q < 4; ++q) {
          p1[q] += t1[(i + q) * 256 + blk[i + q]];
          p2[q] += t2[(i + q) * 256 + blk[kSignBytes + i + q]];
        }
      }
      const float a1 = (p1[0] + p1[1]) + (p1[2] + p1[3]);
      const float a2 = (p2[0] + p2[1]) + (p2[2] + p2[3]);
      uint16_t rh[2];
      std::memcpy(rh, blk + 2 * kSignBytes, 4);
      float acc = fp16_to_f32(rh[0]) * a1 + fp16_to_f32(rh[1]) * a2;
      if (v.salient > 0) {
        const uint8_t* p = v.salient_vals + (o * groups + g) * srb;
        uint16_t sh;
        std::memcpy(&sh, p, 2);
        float sa = 0.f;
        for (int t = 0; t < v.salient; ++t) sa += static_cast<float>(((p[2 + t / 2] >> (4 * (t % 2))) & 15) - 8) * xs[t];
        acc += fp16_to_f32(sh) * sa;
      }
      y[o] += acc;
    }
  }
}

}  // namespace frugal::quant::fluxbin
