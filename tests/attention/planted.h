// Inputs with a planted vertical-slash structure, shared by the estimation test and the backend's
// sparse attention test: every query attends strongly to a few "hot" keys (a shared direction
// e_0) and to the key `offset` positions before it (unit random codes r_p, query i carrying r_i and
// key j carrying r_{j + offset}); the rest is weak noise.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace frugal::testing {

struct Planted {
  int head_dim = 128;
  int n_head = 2;  // query heads, all sharing the pattern (one KV head)
  int32_t n_k = 4096;
  int32_t offset = 700;
  std::vector<int32_t> hot;  // hot key positions
  std::vector<float> q;      // [n_k][n_head][head_dim], query at every position
  std::vector<float> k;      // [n_k][head_dim]
  std::vector<float> v;      // [n_k][head_dim]
  float scale = 0;
};

// Planted scores are `strength` after scaling; noise components have standard deviation 0.3.
inline Planted make_planted(std::mt19937& rng, float strength = 12.f) {
  Planted p;
  const int d = p.head_dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(d));
  const float amp = std::sqrt(strength / p.scale);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int32_t> pick(1, p.n_k - 1);
  for (int i = 0; i < 8; ++i) p.hot.push_back(pick(rng));
  std::vector<float> codes(static_cast<size_t>(p.n_k + p.offset) * d, 0.f);
  for (int32_t s = 0; s < p.n_k + p.offset; ++s) {
    float* c = codes.data() + static_cast<size_t>(s) * d;
    double norm = 0;
    for (int e = 1; e < d; ++e) {
      c[e] = nd(rng);
      norm += static_cast<double>(c[e]) * c[e];
    }
    for (int e = 1; e < d; ++e) c[e] = static_cast<float>(c[e] * amp / std::sqrt(norm));
  }
  p.q.resize(static_cast<size_t>(p.n_k) * p.n_head * d);
  p.k.resize(static_cast<size_t>(p.n_k) * d);
  p.v.resize(static_cast<size_t>(p.n_k) * d);
  for (int32_t i = 0; i < p.n_k; ++i) {
    for (int h = 0; h < p.n_head; ++h) {
      float* q = p.q.data() + (static_cast<size_t>(i) * p.n_head + h) * d;
      for (int e = 0; e < d; ++e) q[e] = 0.3f * nd(rng) + codes[static_cast<size_t>(i) * d + e];
      q[0] += amp;
    }
    float* k = p.k.data() + static_cast<size_t>(i) * d;
    const bool hot = std::find(p.hot.begin(), p.hot.end(), i) != p.hot.end();
    for (int e = 0; e < d; ++e) k[e] = 0.3f * nd(rng) + codes[static_cast<size_t>(i + p.offset) * d + e];
    if (hot) k[0] += amp;
    for (int e = 0; e < d; ++e) p.v[static_cast<size_t>(i) * d + e] = nd(rng);
  }
  return p;
}

}  // namespace frugal::testing
