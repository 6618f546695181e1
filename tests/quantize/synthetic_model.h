// What the whole-model quantization tests share: a scratch folder per test, a small random F16
// model to quantize, and the logits of a fixed 8-token batch to compare quantized models with.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "frugal/backend/backend.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"
#include "frugal/synth/random_model.h"
#include "reference/reference_forward.h"

namespace frugal::quantize::testing {

// A folder named after the running test (suite and name, so two suites' tests of one name in one
// binary do not meet), emptied at both ends.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("frugal_quantize_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

// tiny-llama cut to 2 layers, F16, with the given widths (seed 5).
inline std::string write_f16_model(const TempDir& dir, int64_t n_embd, int64_t n_ff, const std::string& name) {
  auto o = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
  EXPECT_TRUE(o.ok());
  o->weight_type = "F16";
  o->n_layer = 2;
  o->n_embd = n_embd;
  o->n_head = 4;
  o->n_head_kv = 2;
  o->n_ff = n_ff;
  o->n_vocab = 512;
  o->seed = 5;
  const std::string path = dir.file(name);
  EXPECT_TRUE(synth::write_random_model(*o, path).ok());
  return path;
}

// The model's logits for n_tokens fixed tokens on the CPU.
inline std::vector<float> logits_of(const std::string& path, int n_tokens = 8) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto be = make_cpu_backend({});
  auto kv = KvCache::create((*m)->kv_options(1, 16));
  EXPECT_TRUE(kv.ok());
  Batch b;
  for (int i = 0; i < n_tokens; ++i) b.add(1 + 37 * i % 500, i, 0, true);
  std::vector<float> logits(static_cast<size_t>(n_tokens * (*m)->config().n_vocab));
  EXPECT_TRUE((*m)->forward(b, *kv, *be, logits.data()).ok());
  return logits;
}

// Relative L2 distance of the CPU's logits (logits_of, n_tokens) from the independent float64
// forward of the same file (tests/reference); -1 after a failure, which it reports.
inline double cpu_logits_vs_reference(const std::string& path, int n_tokens) {
  const std::vector<float> got = logits_of(path, n_tokens);
  auto ref = reference::ReferenceModel::load(path);
  EXPECT_TRUE(ref.ok()) << ref.status().to_string();
  if (!ref.ok()) return -1;
  std::vector<int32_t> ids;
  for (int i = 0; i < n_tokens; ++i) ids.push_back(1 + 37 * i % 500);  // logits_of's prompt
  auto want = (*ref)->forward(ids);
  EXPECT_TRUE(want.ok()) << want.status().to_string();
  if (!want.ok()) return -1;
  const size_t nv = want->front().size();
  EXPECT_EQ(got.size(), n_tokens * nv);
  if (got.size() != n_tokens * nv) return -1;
  double num = 0, den = 0;
  for (size_t t = 0; t < static_cast<size_t>(n_tokens); ++t) {
    for (size_t v = 0; v < nv; ++v) {
      const double d = got[t * nv + v] - (*want)[t][v];
      num += d * d;
      den += (*want)[t][v] * (*want)[t][v];
    }
  }
  return std::sqrt(num / den);
}

inline double rel_rms_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double e = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(e / r);
}

}  // namespace frugal::quantize::testing
