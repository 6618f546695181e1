// The attention weights of an eviction round (kv/attention_probs.h): the blocked kernel against the
// reference it replaced, same inputs, same run, at the group of one KV head of the Llama-3.1-8B shape
// (4 query heads x 64 recorded queries, head_dim 128) and of the default model (2 x 64, head_dim
// 64), at several key counts. Prints milliseconds per head for each and the ratio reference /
// blocked; a round of the 8B shape scores 256 such heads. Then rkv's key similarity per head: the
// pairwise mean of cosines rkv computed before (O(n^2 d)) against kv/round_stats.h's
// sum-of-unit-keys form (O(n d)), with the largest difference between them.
// Usage: attention_probs_bench [REPETITIONS]   (default 5; the median is printed)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "frugal/kv/attention_probs.h"
#include "frugal/kv/round_stats.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// rkv's redundancy term as it was computed before kv/round_stats.h: unit keys, then every pair.
void pairwise_similarity(const float* keys, int32_t n, int d, float* out) {
  std::vector<float> unit(static_cast<size_t>(n) * d);
  for (int32_t i = 0; i < n; ++i) {
    const float* k = keys + static_cast<size_t>(i) * d;
    double ss = 0;
    for (int e = 0; e < d; ++e) ss += static_cast<double>(k[e]) * k[e];
    const float inv = ss > 0 ? static_cast<float>(1.0 / std::sqrt(ss)) : 0.f;
    for (int e = 0; e < d; ++e) unit[static_cast<size_t>(i) * d + e] = k[e] * inv;
  }
  std::fill(out, out + n, 0.f);
  for (int32_t i = 0; i < n; ++i) {
    const float* a = unit.data() + static_cast<size_t>(i) * d;
    for (int32_t j = i + 1; j < n; ++j) {
      const float* b = unit.data() + static_cast<size_t>(j) * d;
      float s = 0.f;
      for (int e = 0; e < d; ++e) s += a[e] * b[e];
      out[i] += s;
      out[j] += s;
    }
  }
  for (int32_t i = 0; i < n; ++i) out[i] /= static_cast<float>(n - 1);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  struct Shape {
    const char* name;
    int m, head_dim;
  };
  const Shape shapes[] = {{"8B group (4 x 64 queries, d 128)", 256, 128}, {"default model (2 x 64, d 64)", 128, 64}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::printf("%-34s %6s %14s %14s %8s\n", "shape", "keys", "reference ms", "blocked ms", "ratio");
  for (const Shape& s : shapes) {
    for (int32_t n : {512, 2048, 8192}) {
      std::vector<float> qs(static_cast<size_t>(s.m) * s.head_dim), keys(static_cast<size_t>(n) * s.head_dim);
      for (auto& v : qs) v = nd(rng);
      for (auto& v : keys) v = nd(rng);
      std::vector<int32_t> kpos(static_cast<size_t>(n)), qpos(static_cast<size_t>(s.m));
      for (int32_t i = 0; i < n; ++i) kpos[static_cast<size_t>(i)] = i;
      std::vector<const float*> rows(static_cast<size_t>(s.m));
      for (int j = 0; j < s.m; ++j) {
        rows[static_cast<size_t>(j)] = qs.data() + static_cast<size_t>(j) * s.head_dim;
        qpos[static_cast<size_t>(j)] = n - 64 + j % 64;  // the newest 64 positions, as recorded
      }
      const frugal::ProbsQueries q{rows.data(), qpos.data(), s.m};
      const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
      std::vector<float> a(static_cast<size_t>(s.m) * n), b(a.size()), scratch;
      const double ref = median_ms(reps, [&] {
        frugal::attention_probs_reference(q, keys.data(), kpos.data(), n, s.head_dim, scale, 0, a.data());
      });
      const double blk = median_ms(reps, [&] {
        frugal::attention_probs(q, keys.data(), kpos.data(), n, s.head_dim, scale, 0, b.data(), scratch);
      });
      std::printf("%-34s %6d %14.2f %14.2f %7.1fx%s\n", s.name, n, ref, blk, ref / blk, a == b ? "" : "  (DIFFER)");
    }
  }
  std::printf("\n%-34s %6s %14s %14s %8s %10s\n", "rkv key similarity, one head", "keys", "pairwise ms", "sum-of-units ms",
              "ratio", "max diff");
  for (const int d : {128, 64}) {
    for (int32_t n : {512, 2048}) {
      std::vector<float> keys(static_cast<size_t>(n) * d), a(static_cast<size_t>(n)), b(a.size());
      for (auto& v : keys) v = nd(rng) + 0.5f;  // a shared direction: similarities away from 0
      const double pw = median_ms(reps, [&] { pairwise_similarity(keys.data(), n, d, a.data()); });
      const double su = median_ms(reps, [&] { frugal::key_similarity(keys.data(), n, d, b.data()); });
      float diff = 0.f;
      for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
      std::printf("%-34s %6d %14.3f %14.3f %7.1fx %10.2e\n", d == 128 ? "head_dim 128 (8B)" : "head_dim 64 (default)", n,
                  pw, su, pw / su, diff);
    }
  }
  return 0;
}
