// Checks of the float64 reference forward itself: against llama.cpp's logits on a real model, and
// against itself under transformations that must not change the result.
#include "reference/reference_forward.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "frugal/synth/random_model.h"

namespace frugal::reference {
namespace {

using Logits = std::vector<std::vector<double>>;

std::string temp_path(const std::string& name) {
  return std::string(FRUGAL_BINARY_DIR) + "/synth_ref_" + name + ".gguf";
}

std::unique_ptr<ReferenceModel> load_or_die(const std::string& path) {
  auto m = ReferenceModel::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

Logits run(const ReferenceModel& m, const std::vector<int32_t>& tokens, const RefForwardOptions& opts = {}) {
  auto r = m.forward(tokens, opts);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : Logits{};
}

double max_abs(const Logits& a) {
  double m = 0;
  for (const auto& row : a) {
    for (double v : row) m = std::max(m, std::fabs(v));
  }
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<int32_t> some_tokens(size_t n, int32_t n_vocab, uint32_t seed) {
  std::vector<int32_t> t;
  uint32_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((s >> 8) % static_cast<uint32_t>(n_vocab)));
  }
  return t;
}

// A tiny preset written in F32, so rewritten copies stay exact.
std::string write_preset(const std::string& preset, const std::string& type = "F32") {
  auto o = synth::random_model_preset(preset);
  EXPECT_TRUE(o.ok());
  o->weight_type = type;
  o->n_vocab = o->vocab.kind == synth::VocabKind::kSpm ? 300 : o->n_vocab;
  const std::string path = temp_path(preset + "_" + type);
  const Status st = synth::write_random_model(*o, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

// Rewrites a GGUF (F32 tensors only): `key` maps each metadata key (empty: drop it), `tensor`
// may replace a tensor's dims and values.
using TensorFn = std::function<void(const std::string& name, std::vector<int64_t>& dims, std::vector<float>& v)>;
void rewrite(const std::string& src, const std::string& dst, const std::function<std::string(const std::string&)>& key,
             const std::vector<std::pair<std::string, GgufValue>>& extra, const TensorFn& tensor) {
  auto f = GgufFile::open(src);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  GgufWriter w;
  for (const auto& [k, v] : (*f)->metadata()) {
    const std::string nk = key(k);
    if (!nk.empty()) w.set_value(nk, v);
  }
  for (const auto& [k, v] : extra) w.set_value(k, v);
  for (const auto& t : (*f)->tensors()) {
    ASSERT_EQ(t.type, DType::kF32) << t.name;
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    std::vector<int64_t> dims = t.dims;
    tensor(t.name, dims, v);
    ASSERT_TRUE(w.add_tensor(t.name, DType::kF32, dims, v.data(), v.size() * 4).ok());
  }
  ASSERT_TRUE(w.write(dst).ok());
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp's logits for stories260K (tests/data/README.md says how they were made). With an F32
// KV cache llama.cpp computes in float32 throughout, so only float rounding separates it from the
// float64 reference; with its default F16 cache, Q, K, V and the softmax weights are rounded to
// half precision, which moves logits by up to about 0.016.
TEST(ReferenceForward, MatchesLlamaCppOnStories260K) {
  std::ifstream in(std::string(FRUGAL_SOURCE_DIR) + "/tests/data/stories260K_logits.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json data = nlohmann::json::parse(in);
  auto m = load_or_die(std::string(FRUGAL_SHARED_MODELS_DIR) + "/stories260K.gguf");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().n_rot, 8);
  EXPECT_FALSE(m->config().neox);
  ASSERT_EQ(data["cases"].size(), 2u);
  for (const auto& c : data["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const auto tokens = c["prompt_tokens"].get<std::vector<int32_t>>();
    const auto f32 = c["logits_kv_f32"].get<std::vector<double>>();
    const auto f16 = c["logits"].get<std::vector<double>>();
    const Logits l = run(*m, tokens);
    ASSERT_EQ(l.size(), tokens.size());
    const std::vector<double>& last = l.back();
    ASSERT_EQ(last.size(), f32.size());
    // Logits span about -12..18; float32 accumulation leaves about 5e-6 here.
    EXPECT_LT(max_abs_diff(last, f32), 5e-5);
    EXPECT_LT(max_abs_diff(last, f16), 0.03);
    const auto argmax = std::max_element(last.begin(), last.end()) - last.begin();
    EXPECT_EQ(argmax, c["argmax"].get<int64_t>());
  }
}

TEST(ReferenceForward, LaterTokensDoNotChangeEarlierLogits) {
  const std::string path = write_preset("tiny-llama");
  auto m = load_or_die(path);
  ASSERT_NE(m, nullptr);
  const auto tokens = some_tokens(12, 300, 1);
  const Logits full = run(*m, tokens);
  const Logits prefix = run(*m, std::vector<int32_t>(tokens.begin(), tokens.begin() + 5));
  ASSERT_EQ(full.size(), 12u);
  ASSERT_EQ(prefix.size(), 5u);
  ASSERT_EQ(full[0].size(), 300u);
  for (size_t t = 0; t < 5; ++t) EXPECT_EQ(max_abs_diff(full[t], prefix[t]), 0.0) << t;
  // ...and the last rows do depend on the context.
  EXPECT_GT(max_abs_diff(full[11], run(*m, {tokens[11]})[0]), 1e-3);
  std::remove(path.c_str());
}

TEST(ReferenceForward, SlidingWindowCoveringTheSequenceChangesNothing) {
  const std::string path = write_preset("tiny-mistral");
  auto m = load_or_die(path);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().sliding_window, 16);
  const auto tokens = some_tokens(24, 300, 2);
  const Logits none = run(*m, tokens, {.sliding_window = 0});
  const Logits wide = run(*m, tokens, {.sliding_window = 24});
  const Logits file = run(*m, tokens);  // the file's window: 16
  const Logits w16 = run(*m, tokens, {.sliding_window = 16});
  for (size_t t = 0; t < tokens.size(); ++t) {
    EXPECT_EQ(max_abs_diff(none[t], wide[t]), 0.0) << t;
    EXPECT_EQ(max_abs_diff(file[t], w16[t]), 0.0) << t;
    // Position t sees keys t-15..t: identical to no window while t < 16, different after.
    if (t < 16) {
      EXPECT_EQ(max_abs_diff(file[t], none[t]), 0.0) << t;
    } else {
      EXPECT_GT(max_abs_diff(file[t], none[t]), 1e-6) << t;
    }
  }
  std::remove(path.c_str());
}

// The llama converter stores Q/K rows interleaved (GGUF row 2i = HF row i, 2i+1 = HF row i + d/2)
// and runs NORM rope; an architecture run with NEOX rope keeps HF's order. So a llama file whose
// Q/K rows are put back in HF order and relabelled qwen2 must give the same logits.
TEST(ReferenceForward, NormRopeOnPermutedRowsEqualsNeoxRope) {
  const std::string src = write_preset("tiny-llama");
  const std::string dst = temp_path("as_qwen2");
  auto m = load_or_die(src);
  ASSERT_NE(m, nullptr);
  const int64_t d = m->config().head_dim;
  ASSERT_EQ(m->config().n_rot, d);
  auto key = [](const std::string& k) {
    if (k.rfind("llama.", 0) == 0) return "qwen2." + k.substr(6);
    return k == "general.architecture" ? std::string() : k;
  };
  GgufValue arch;
  arch.type = GgufType::kString;
  arch.s = "qwen2";
  rewrite(src, dst, key, {{"general.architecture", arch}},
          [&](const std::string& name, std::vector<int64_t>& dims, std::vector<float>& v) {
            if (!ends_with(name, "attn_q.weight") && !ends_with(name, "attn_k.weight")) return;
            const int64_t cols = dims[0];
            const std::vector<float> old = v;
            for (int64_t head = 0; head < dims[1] / d; ++head) {
              for (int64_t i = 0; i < d / 2; ++i) {
                const float* r0 = old.data() + (head * d + 2 * i) * cols;
                const float* r1 = old.data() + (head * d + 2 * i + 1) * cols;
                std::memcpy(v.data() + (head * d + i) * cols, r0, static_cast<size_t>(cols) * 4);
                std::memcpy(v.data() + (head * d + i + d / 2) * cols, r1, static_cast<size_t>(cols) * 4);
              }
            }
          });
  auto n = load_or_die(dst);
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->config().neox);
  const auto tokens = some_tokens(10, 300, 3);
  const Logits a = run(*m, tokens), b = run(*n, tokens);
  ASSERT_EQ(a.size(), b.size());
  const double scale = max_abs(a);
  for (size_t t = 0; t < a.size(); ++t) EXPECT_LT(max_abs_diff(a[t], b[t]), 1e-12 * scale + 1e-13) << t;
  std::remove(src.c_str());
  std::remove(dst.c_str());
}

// Grouped-query attention is multi-head attention with each KV head repeated for its group.
TEST(ReferenceForward, GqaEqualsMhaWithRepeatedKvHeads) {
  const std::string src = write_preset("tiny-mistral");  // 8 heads, 2 KV heads: groups of 4
  const std::string dst = temp_path("mha");
  auto m = load_or_die(src);
  ASSERT_NE(m, nullptr);
  const int64_t d = m->config().head_dim, n_head = m->config().n_head, n_kv = m->config().n_head_kv;
  ASSERT_EQ(n_head / n_kv, 4);
  auto key = [](const std::string& k) { return k == "llama.attention.head_count_kv" ? std::string() : k; };
  GgufValue kv;
  kv.type = GgufType::kU32;
  kv.i = n_head;
  rewrite(src, dst, key, {{"llama.attention.head_count_kv", kv}},
          [&](const std::string& name, std::vector<int64_t>& dims, std::vector<float>& v) {
            if (!ends_with(name, "attn_k.weight") && !ends_with(name, "attn_v.weight")) return;
            const int64_t cols = dims[0];
            std::vector<float> out;
            for (int64_t h = 0; h < n_head; ++h) {
              const float* block = v.data() + (h / (n_head / n_kv)) * d * cols;
              out.insert(out.end(), block, block + d * cols);
            }
            v = std::move(out);
            dims[1] = n_head * d;
          });
  auto n = load_or_die(dst);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->config().n_head_kv, n_head);
  const auto tokens = some_tokens(20, 300, 4);
  const Logits a = run(*m, tokens), b = run(*n, tokens);
  const double scale = max_abs(a);
  for (size_t t = 0; t < a.size(); ++t) EXPECT_LT(max_abs_diff(a[t], b[t]), 1e-12 * scale + 1e-13) << t;
  std::remove(src.c_str());
  std::remove(dst.c_str());
}

TEST(ReferenceForward, RunsEveryTinyPresetInQuantizedTypes) {
  for (const std::string preset : {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    for (const std::string type : {"Q4_K_M"}) {
      SCOPED_TRACE(preset + " " + type);
      const std::string path = write_preset(preset, type);
      auto m = load_or_die(path);
      ASSERT_NE(m, nullptr);
      const auto tokens = some_tokens(6, static_cast<int32_t>(m->config().n_vocab), 5);
      const Logits l = run(*m, tokens);
      ASSERT_EQ(l.size(), tokens.size());
      double sum_sq = 0;
      for (const auto& row : l) {
        ASSERT_EQ(static_cast<int64_t>(row.size()), m->config().n_vocab);
        for (double v : row) {
          ASSERT_TRUE(std::isfinite(v));
          sum_sq += v * v;
        }
      }
      // Random weights of std 0.02 give logits of order one, not zeros or blow-ups.
      const double rms = std::sqrt(sum_sq / static_cast<double>(l.size() * l[0].size()));
      EXPECT_GT(rms, 0.05);
      EXPECT_LT(rms, 20.0);
      EXPECT_EQ(m->config().neox, preset == "tiny-qwen2" || preset == "tiny-qwen3");
      std::remove(path.c_str());
    }
  }
}

TEST(ReferenceForward, RejectsTokensOutsideTheVocabulary) {
  const std::string path = write_preset("tiny-qwen2");
  auto m = load_or_die(path);
  ASSERT_NE(m, nullptr);
  auto r = m->forward({1, static_cast<int32_t>(m->config().n_vocab)});
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace frugal::reference
