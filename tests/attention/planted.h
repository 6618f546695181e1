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

// Inputs with a planted query-specific block pattern: the keys of key block b share a direction
// (a unit code c_b scaled by amp), and the queries of query block qb carry the code of one
// earlier key block target[qb] (block 0 for query blocks 0 and 1, else one of blocks 1 .. qb - 1):
// every block of queries attends to a block of keys of its own, which no vertical (keys every
// query sees) or slash (a fixed offset) describes. Planted scores are `strength`; the codes of
// other blocks give scores of standard deviation about strength / sqrt(head_dim).
struct PlantedBlocks {
  int head_dim = 128;
  int n_head = 2;  // query heads, all sharing the pattern (one KV head)
  int32_t n_k = 0;
  std::vector<int32_t> target;  // [query block] -> key block
  std::vector<float> q;         // [n_k][n_head][head_dim]
  std::vector<float> k;         // [n_k][head_dim]
  float scale = 0;
};

inline PlantedBlocks make_planted_blocks(std::mt19937& rng, int32_t n_k = 4096, float strength = 10.f) {
  PlantedBlocks p;
  p.n_k = n_k;
  const int d = p.head_dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(d));
  const float amp = std::sqrt(strength / p.scale);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int32_t n_blocks = (n_k + 63) / 64;
  std::vector<float> codes(static_cast<size_t>(n_blocks) * d);
  for (int32_t b = 0; b < n_blocks; ++b) {
    float* c = codes.data() + static_cast<size_t>(b) * d;
    double norm = 0;
    for (int e = 0; e < d; ++e) {
      c[e] = nd(rng);
      norm += static_cast<double>(c[e]) * c[e];
    }
    for (int e = 0; e < d; ++e) c[e] = static_cast<float>(c[e] * amp / std::sqrt(norm));
  }
  for (int32_t qb = 0; qb < n_blocks; ++qb) {
    p.target.push_back(qb < 2 ? 0 : std::uniform_int_distribution<int32_t>(1, qb - 1)(rng));
  }
  p.q.resize(static_cast<size_t>(n_k) * p.n_head * d);
  p.k.resize(static_cast<size_t>(n_k) * d);
  for (int32_t i = 0; i < n_k; ++i) {
    const float* kc = codes.data() + static_cast<size_t>(i / 64) * d;
    const float* qc = codes.data() + static_cast<size_t>(p.target[i / 64]) * d;
    for (int h = 0; h < p.n_head; ++h) {
      float* q = p.q.data() + (static_cast<size_t>(i) * p.n_head + h) * d;
      for (int e = 0; e < d; ++e) q[e] = 0.3f * nd(rng) + qc[e];
    }
    float* k = p.k.data() + static_cast<size_t>(i) * d;
    for (int e = 0; e < d; ++e) k[e] = 0.3f * nd(rng) + kc[e];
  }
  return p;
}

// Background noise with an attention sink: query and key components are independent N(0, 1)
// (scores of standard deviation about 1 after scaling), except that key 0 carries a direction
// every query shares, strong enough to take about `sink_share` of every query's attention; with
// `hot` >= 0, key `hot` carries another shared direction that takes about `hot_share`.
struct NoiseWithSink {
  int head_dim = 64;
  int n_head = 2;
  int32_t n_k = 0;
  std::vector<float> q;  // [n_k][n_head][head_dim]
  std::vector<float> k;  // [n_k][head_dim]
  float scale = 0;
};

inline NoiseWithSink make_noise_with_sink(std::mt19937& rng, int32_t n_k, float sink_share = 0.5f,
                                          int32_t hot = -1, float hot_share = 0.f) {
  NoiseWithSink p;
  p.n_k = n_k;
  const int d = p.head_dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(d));
  std::normal_distribution<float> nd(0.f, 1.f);
  // A query's partition function without the two is about (n_k - 1) e^{sigma^2 / 2}, sigma^2 = (d - 2) / d.
  const double background = (n_k - 1) * std::exp(0.5 * (d - 2) / d);
  const double rest = 1.0 - sink_share - hot_share;
  const float s_sink = static_cast<float>(std::log(sink_share / rest * background));
  const float s_hot = hot >= 0 ? static_cast<float>(std::log(hot_share / rest * background)) : 0.f;
  const float qa = 4.f;  // the queries' component along both directions
  p.q.resize(static_cast<size_t>(n_k) * p.n_head * d);
  p.k.resize(static_cast<size_t>(n_k) * d);
  for (int32_t i = 0; i < n_k; ++i) {
    for (int h = 0; h < p.n_head; ++h) {
      float* q = p.q.data() + (static_cast<size_t>(i) * p.n_head + h) * d;
      q[0] = qa;
      q[1] = qa;
      for (int e = 2; e < d; ++e) q[e] = nd(rng);
    }
    float* k = p.k.data() + static_cast<size_t>(i) * d;
    k[0] = i == 0 ? s_sink / (qa * p.scale) : 0.f;
    k[1] = i == hot ? s_hot / (qa * p.scale) : 0.f;
    for (int e = 2; e < d; ++e) k[e] = nd(rng);
  }
  return p;
}

}  // namespace frugal::testing
