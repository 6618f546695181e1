// The W8A8 backend (quantize/w8a8_backend.h) on whole random-weight models (llama, and qwen2 for
// the QKV bias): with power-of-two scales the two INT8 kernels agree on every layer, bit for bit,
// and give the same greedy tokens; with the original scales their int32 accumulators still agree
// and the outputs stay within one bf16 spacing; the INT8 model stays close to the float one.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"
#include "frugal/quantize/w8a8_backend.h"
#include "frugal/synth/random_model.h"

namespace frugal::quantize {
namespace {

namespace fs = std::filesystem;
namespace w8 = quant::w8a8;

std::string write_model(const std::string& preset) {
  const fs::path p = fs::temp_directory_path() / ("frugal_w8a8_" + std::to_string(::getpid()) + "_" + preset + ".gguf");
  auto o = synth::random_model_preset(preset, FRUGAL_SHARED_MODELS_DIR);
  EXPECT_TRUE(o.ok());
  o->weight_type = "F16";
  o->n_layer = 2;
  o->seed = 11;
  EXPECT_TRUE(synth::write_random_model(*o, p.string()).ok());
  return p.string();
}

// Greedy tokens after an 8-token prompt, and the prompt's logits.
std::vector<int32_t> greedy(Model& m, Backend& be, int n_new, std::vector<float>* logits = nullptr) {
  auto kv = KvCache::create(m.kv_options(1, 8 + n_new));
  EXPECT_TRUE(kv.ok());
  Batch b;
  for (int i = 0; i < 8; ++i) b.add(1 + 37 * i % 500, i, 0, true);
  std::vector<float> lg(static_cast<size_t>(8 * m.config().n_vocab));
  EXPECT_TRUE(m.forward(b, *kv, be, lg.data()).ok());
  int32_t tok = 0;
  {
    float best = -INFINITY;
    const float* last = lg.data() + 7 * m.config().n_vocab;
    for (int64_t v = 0; v < m.config().n_vocab; ++v) {
      if (last[v] > best) {
        best = last[v];
        tok = static_cast<int32_t>(v);
      }
    }
  }
  if (logits != nullptr) *logits = lg;
  std::vector<int32_t> out = {tok};
  for (int i = 1; i < n_new; ++i) {
    b.clear();
    b.add(tok, 7 + i, 0, true);
    EXPECT_TRUE(m.forward_greedy(b, *kv, be, &tok).ok());
    out.push_back(tok);
  }
  return out;
}

class W8A8Model : public ::testing::TestWithParam<const char*> {};

TEST_P(W8A8Model, Pow2KernelsAgreeBitwiseOnEveryLayer) {
  const std::string path = write_model(GetParam());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto cpu = make_cpu_backend({});
  for (W8A8Scales rule : {W8A8Scales::kOriginal, W8A8Scales::kPow2}) {
    for (w8::OutputType out : {w8::OutputType::kBF16, w8::OutputType::kF32}) {
      W8A8Options o;
      o.scales = rule;
      o.out = out;
      o.kernel = &w8::scale_product_kernel();
      o.shadow = &w8::sequential_fma_kernel();
      o.n_threads = 2;
      auto a = W8A8Backend::create(**m, *cpu, o);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      o.kernel = &w8::sequential_fma_kernel();
      o.shadow = nullptr;
      auto b = W8A8Backend::create(**m, *cpu, o);
      ASSERT_TRUE(b.ok());
      const std::vector<int32_t> ta = greedy(**m, **a, 12), tb = greedy(**m, **b, 12);
      const auto& st = (*a)->layer_stats();
      ASSERT_EQ(st.size(), 2u * 7u);
      int identical = 0;
      for (const auto& l : st) {
        EXPECT_GT(l.calls, 0) << l.name;
        EXPECT_EQ(l.acc_mismatches, 0) << l.name;
        identical += l.identical();
        if (out == w8::OutputType::kBF16) {
          EXPECT_LE(l.max_spacings, 1) << l.name;
        }
      }
      SCOPED_TRACE(std::string(w8a8_scales_name(rule)) + " " + w8::output_type_name(out));
      if (rule == W8A8Scales::kPow2) {
        EXPECT_EQ(identical, static_cast<int>(st.size()));
        EXPECT_EQ(ta, tb);
        // Random weights: almost no scale is a power of two already.
        EXPECT_GE((*a)->pow2_stats().rows_rescaled * 100, (*a)->pow2_stats().rows * 99);
      } else if (out == w8::OutputType::kF32) {
        EXPECT_LT(identical, static_cast<int>(st.size()));  // the epilogues differ somewhere
      }
    }
  }
  fs::remove(path);
}

TEST_P(W8A8Model, StaysCloseToTheFloatModel) {
  const std::string path = write_model(GetParam());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok());
  auto cpu = make_cpu_backend({});
  std::vector<float> ref, got, artifact;
  greedy(**m, *cpu, 1, &ref);
  W8A8Options o;
  o.kernel = &w8::scale_product_kernel();
  double err[3] = {0, 0, 0};
  const W8A8Scales rules[3] = {W8A8Scales::kOriginal, W8A8Scales::kPow2, W8A8Scales::kScalesOnly};
  for (int k = 0; k < 3; ++k) {
    o.scales = rules[k];
    auto be = W8A8Backend::create(**m, *cpu, o);
    ASSERT_TRUE(be.ok());
    greedy(**m, **be, 1, &got);
    double e = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      e += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
      r += static_cast<double>(ref[i]) * ref[i];
    }
    err[k] = std::sqrt(e / r);
  }
  std::printf("  relative RMS logit error vs float: original %.4f, pow2 %.4f, scales only %.4f\n", err[0], err[1],
              err[2]);
  EXPECT_LT(err[0], 0.05);
  EXPECT_LT(err[1], 0.1);
  EXPECT_GT(err[2], 2 * err[1]);  // keeping the integers under a rewritten scale is far worse
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Archs, W8A8Model, ::testing::Values("tiny-llama", "tiny-qwen2"));

TEST(W8A8Scales, NamesRoundTrip) {
  for (W8A8Scales s : {W8A8Scales::kOriginal, W8A8Scales::kPow2, W8A8Scales::kScalesOnly}) {
    auto p = parse_w8a8_scales(w8a8_scales_name(s));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, s);
  }
  EXPECT_FALSE(parse_w8a8_scales("pot").ok());
}

}  // namespace
}  // namespace frugal::quantize
