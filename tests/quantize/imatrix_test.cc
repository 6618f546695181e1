// Importance matrices: the .dat file round trip and its errors, the collector on a real model
// (stories260K), and quantizing with a collected matrix.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "frugal/quantize/importance_collector.h"
#include "frugal/quantize/imatrix_file.h"
#include "frugal/quantize/model_quantizer.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal::quantize {
namespace {

namespace fs = std::filesystem;
const std::string kStories = std::string(FRUGAL_SHARED_MODELS_DIR) + "/stories260K.gguf";

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() / ("frugal_imatrix_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(ImatrixFile, RoundTripsFreshValues) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(0.f, 10.f);
  Imatrix m;
  m.chunks = static_cast<int32_t>(rng() % 100 + 1);
  m.dataset = "calibration text.txt";
  for (int e = 0; e < 5; ++e) {
    ImatrixEntry& en = m.entries["blk." + std::to_string(e) + ".ffn_down.weight"];
    en.ncall = static_cast<int32_t>(rng() % 50 + 1);
    en.values.resize(32 + rng() % 300);
    for (float& v : en.values) v = u(rng);
  }
  const std::string path = temp_file("rt.dat");
  ASSERT_TRUE(write_imatrix(path, m).ok());
  auto back = read_imatrix(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->chunks, m.chunks);
  EXPECT_EQ(back->dataset, m.dataset);
  ASSERT_EQ(back->entries.size(), m.entries.size());
  for (const auto& [name, e] : m.entries) {
    const ImatrixEntry& b = back->entries.at(name);
    EXPECT_EQ(b.ncall, e.ncall);
    EXPECT_EQ(b.values, e.values);
    const auto mean = b.mean();
    for (size_t j = 0; j < mean.size(); ++j) EXPECT_FLOAT_EQ(mean[j], e.values[j] / static_cast<float>(e.ncall));
  }
  // Truncated anywhere: an error naming the file, never a crash.
  const auto size = fs::file_size(path);
  for (uintmax_t cut : {uintmax_t{2}, size / 3, size - 3}) {
    fs::resize_file(path, cut);
    auto r = read_imatrix(path);
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_NE(r.status().message().find(path), std::string::npos);
  }
  fs::remove(path);
  EXPECT_FALSE(read_imatrix(path).ok());
}

TEST(ImatrixFile, RefusesNonFiniteValues) {
  Imatrix m;
  m.entries["blk.0.attn_q.weight"] = {1, {1.f, NAN, 2.f}};
  const std::string path = temp_file("nan.dat");
  ASSERT_TRUE(write_imatrix(path, m).ok());
  auto r = read_imatrix(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("blk.0.attn_q.weight"), std::string::npos);
  fs::remove(path);
}

TEST(ImportanceCollector, CountsEveryLayerInputOnStories) {
  if (!std::ifstream(kStories).good()) GTEST_SKIP() << "missing " << kStories;
  auto m = Model::load(kStories);
  ASSERT_TRUE(m.ok());
  auto be = make_cpu_backend({});
  std::mt19937 rng(std::random_device{}());
  std::vector<TokenId> toks(200);
  for (auto& t : toks) t = static_cast<TokenId>(3 + rng() % 500);
  ImatrixRunOptions o;
  o.n_ctx = 64;
  o.bos = 1;
  o.dataset = "random tokens";
  auto im = collect_imatrix(**m, *be, toks, o);
  ASSERT_TRUE(im.ok()) << im.status().to_string();
  const int64_t n_layer = (*m)->config().n_layer;
  EXPECT_EQ(im->chunks, 3);
  EXPECT_EQ(static_cast<int64_t>(im->entries.size()), 7 * n_layer);  // q k v o gate up down
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const auto& q = im->entries.at(p + "attn_q.weight");
    EXPECT_EQ(q.ncall, 3);
    // Q, K and V read the same normed input, as do gate and up: their statistics are equal.
    EXPECT_EQ(q.values, im->entries.at(p + "attn_k.weight").values);
    EXPECT_EQ(q.values, im->entries.at(p + "attn_v.weight").values);
    EXPECT_EQ(im->entries.at(p + "ffn_gate.weight").values, im->entries.at(p + "ffn_up.weight").values);
    EXPECT_EQ(static_cast<int64_t>(im->entries.at(p + "ffn_down.weight").values.size()), (*m)->config().n_ff);
    for (float v : q.values) EXPECT_GT(v, 0.f);
  }
  // Fewer tokens than one chunk: an error, not an empty file.
  toks.resize(10);
  EXPECT_FALSE(collect_imatrix(**m, *be, toks, o).ok());
}

}  // namespace
}  // namespace frugal::quantize
