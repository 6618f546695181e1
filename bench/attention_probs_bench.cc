// The attention weights of an eviction round (kv/attention_probs.h): the blocked kernel against the
// reference it replaced, same inputs, same run, at the group of one KV head of the Llama-3.1-8B shape
// (4 query heads x 64 recorded queries, head_dim 128) and of the default model (2 x 64, head_dim
// 64), at several key counts. Prints milliseconds per head for each and the ratio reference /
// blocked; a round of the 8B shape scores 256 such heads.
// Usage: attention_probs_bench [REPETITIONS]   (default 5; the median is printed)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "frugal/kv/attention_probs.h"

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
  return 0;
}
