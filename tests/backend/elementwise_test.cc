// rms_norm, rope, swiglu, add against scalar references computed in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace frugal {
namespace {

using testing::backend_with;
using testing::for_each_target_and_threads;
using testing::random_floats;

TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(11);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t dim : {1, 7, 64, 896, 2053}) {
      for (int64_t rows : {1, 3, 40}) {
        const auto x = random_floats(rng, rows * dim, 3.0f);
        const auto w = random_floats(rng, dim);
        const float eps = 1e-5f;
        std::vector<float> y(x.size());
        be.rms_norm(x.data(), w.data(), rows, dim, eps, y.data());
        std::vector<float> inplace = x;
        be.rms_norm(inplace.data(), w.data(), rows, dim, eps, inplace.data());
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
          const double scale = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
          for (int64_t i = 0; i < dim; ++i) {
            const double ref = x[r * dim + i] * scale * w[i];
            ASSERT_NEAR(y[r * dim + i], ref, 1e-5 * (1 + std::abs(ref)))
                << "dim " << dim << " row " << r << " i " << i;
            ASSERT_EQ(inplace[r * dim + i], y[r * dim + i]);
          }
        }
      }
    }
  });
}

TEST(Swiglu, MatchesReference) {
  std::mt19937 rng(12);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {1, 5, 17, 5632, 40000}) {
      auto g = random_floats(rng, n, 4.0f);
      const auto u = random_floats(rng, n);
      if (n > 4) {
        g[0] = -120.f;  // exp(-g) overflows a float
        g[1] = 95.f;
        g[2] = 0.f;
      }
      std::vector<float> out(n);
      be.swiglu(g.data(), u.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double gd = g[i];
        const double ref = gd / (1.0 + std::exp(-gd)) * u[i];
        ASSERT_NEAR(out[i], ref, 2e-6 * (1 + std::abs(ref))) << "n " << n << " i " << i << " g " << g[i];
      }
      // In place over gate, as the model calls it.
      std::vector<float> inplace = g;
      be.swiglu(inplace.data(), u.data(), n, inplace.data());
      ASSERT_EQ(inplace, out);
    }
  });
}

TEST(Add, MatchesReference) {
  std::mt19937 rng(13);
  for_each_target_and_threads([&](Backend& be) {
    for (int64_t n : {1, 9, 2048, 100003}) {
      auto x = random_floats(rng, n);
      const auto y = random_floats(rng, n);
      const auto x0 = x;
      be.add(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], x0[i] + y[i]) << i;
    }
  });
}

struct RopeCase {
  int64_t head_dim;
  int n_rot;
  bool neox;
  float base;
  float freq_scale;
  bool factors;
};

// ggml's angle recipe (float theta, repeated multiplication by base^(-2/n_rot)), rotation in
// double.
void rope_reference(std::vector<float>& x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const std::vector<int32_t>& pos, const RopeParams& p) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  for (int64_t t = 0; t < n_tokens; ++t) {
    std::vector<double> c(p.n_rot / 2), s(p.n_rot / 2);
    float theta = static_cast<float>(pos[t]);
    for (int i = 0; i < p.n_rot / 2; ++i) {
      const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
      const float a = p.freq_scale * (theta / ff);
      c[i] = std::cos(a);
      s[i] = std::sin(a);
      theta *= theta_scale;
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x.data() + (t * n_heads + h) * head_dim;
      for (int i = 0; i < p.n_rot / 2; ++i) {
        const int64_t i0 = p.neox ? i : 2 * i;
        const int64_t i1 = p.neox ? i + p.n_rot / 2 : 2 * i + 1;
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = static_cast<float>(x0 * c[i] - x1 * s[i]);
        v[i1] = static_cast<float>(x0 * s[i] + x1 * c[i]);
      }
    }
  }
}

TEST(Rope, MatchesReference) {
  std::mt19937 rng(14);
  const RopeCase cases[] = {
      {64, 64, false, 10000.f, 1.f, false}, {64, 64, true, 1000000.f, 1.f, false},
      {80, 32, true, 10000.f, 0.25f, false}, {128, 128, false, 500000.f, 1.f, true},
      {40, 40, true, 10000.f, 1.f, true},    {6, 4, false, 10000.f, 1.f, false},
  };
  for_each_target_and_threads([&](Backend& be) {
    for (const RopeCase& rc : cases) {
      for (int64_t n_tokens : {1, 3, 37}) {
        const int64_t n_heads = 5;
        const auto x0 = random_floats(rng, n_tokens * n_heads * rc.head_dim);
        std::vector<int32_t> pos(n_tokens);
        for (auto& p : pos) p = std::uniform_int_distribution<int32_t>(0, 5000)(rng);
        std::vector<float> factors(rc.n_rot / 2);
        for (float& f : factors) f = std::uniform_real_distribution<float>(1.f, 40.f)(rng);
        RopeParams p;
        p.n_rot = rc.n_rot;
        p.neox = rc.neox;
        p.freq_base = rc.base;
        p.freq_scale = rc.freq_scale;
        p.freq_factors = rc.factors ? factors.data() : nullptr;
        auto x = x0;
        be.rope(x.data(), n_tokens, n_heads, rc.head_dim, pos.data(), p);
        auto ref = x0;
        rope_reference(ref, n_tokens, n_heads, rc.head_dim, pos, p);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_NEAR(x[i], ref[i], 1e-5 * (1 + std::abs(ref[i])))
              << "head_dim " << rc.head_dim << " neox " << rc.neox << " i " << i;
        }
        // Dimensions past n_rot pass through untouched.
        for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
          for (int64_t i = rc.n_rot; i < rc.head_dim; ++i) {
            ASSERT_EQ(x[r * rc.head_dim + i], x0[r * rc.head_dim + i]);
          }
        }
      }
    }
  });
}

// Independent of ggml's float recipe: with small positions the angles agree with the exact
// formula pos * base^(-2i/n_rot) to float precision.
TEST(Rope, AnglesMatchExactFormula) {
  std::mt19937 rng(15);
  auto be = backend_with(2);
  for (bool neox : {false, true}) {
    const int64_t head_dim = 64, n_heads = 3, n_tokens = 20;
    const auto x0 = random_floats(rng, n_tokens * n_heads * head_dim);
    std::vector<int32_t> pos(n_tokens);
    for (int t = 0; t < n_tokens; ++t) pos[t] = t * 3;
    RopeParams p;
    p.n_rot = 64;
    p.neox = neox;
    auto x = x0;
    be->rope(x.data(), n_tokens, n_heads, head_dim, pos.data(), p);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        const float* a = x0.data() + (t * n_heads + h) * head_dim;
        const float* b = x.data() + (t * n_heads + h) * head_dim;
        for (int i = 0; i < 32; ++i) {
          const double ang = pos[t] * std::pow(10000.0, -2.0 * i / 64.0);
          const int i0 = neox ? i : 2 * i, i1 = neox ? i + 32 : 2 * i + 1;
          EXPECT_NEAR(b[i0], a[i0] * std::cos(ang) - a[i1] * std::sin(ang), 1e-4);
          EXPECT_NEAR(b[i1], a[i0] * std::sin(ang) + a[i1] * std::cos(ang), 1e-4);
        }
      }
    }
  }
}

}  // namespace
}  // namespace frugal
