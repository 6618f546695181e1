#include "frugal/synth/random_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "frugal/format/gguf.h"
#include "frugal/quant/type_traits.h"
#include "frugal/synth/synth_vocab.h"

namespace frugal::synth {
namespace {

std::string temp_path(const std::string& name) {
  return std::string(FRUGAL_BINARY_DIR) + "/synth_test_" + name + ".gguf";
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A small llama whose rows are all multiples of 256, so no type falls back.
RandomModelOptions small_options(const std::string& weight_type) {
  RandomModelOptions o;
  o.arch = "llama";
  o.n_embd = 256;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_vocab = 300;
  o.weight_type = weight_type;
  o.seed = 7;
  return o;
}

std::unique_ptr<GgufFile> open_or_die(const std::string& path) {
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f).value() : nullptr;
}

// Mean and standard deviation of a whole tensor, dequantized with the reference code.
std::pair<double, double> tensor_moments(const GgufTensorInfo& t) {
  const TypeTraits* tr = type_traits(t.type);
  const int64_t n = t.n_elements();
  std::vector<float> f(static_cast<size_t>(n));
  tr->to_float_ref(t.data, f.data(), n);
  double s = 0, ss = 0;
  for (float v : f) {
    s += v;
    ss += static_cast<double>(v) * v;
  }
  const double mean = s / static_cast<double>(n);
  return {mean, std::sqrt(ss / static_cast<double>(n) - mean * mean)};
}

TEST(RandomModel, EveryWeightTypeReadsBackWithShapesTypesAndStatistics) {
  const std::vector<std::string> types = {"F32", "F16",  "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                          "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"};
  for (const std::string& type : types) {
    SCOPED_TRACE(type);
    const RandomModelOptions o = small_options(type);
    const std::string path = temp_path("type_" + type);
    ASSERT_TRUE(write_random_model(o, path).ok());
    auto f = open_or_die(path);
    ASSERT_NE(f, nullptr);
    const DType want = *dtype_from_name(type);
    EXPECT_EQ(*f->get_string("general.architecture"), "llama");
    EXPECT_EQ(*f->get_int("llama.embedding_length"), 256);
    EXPECT_EQ(*f->get_int("llama.block_count"), 2);
    EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(*f->get_int("llama.vocab_size"), 300);
    // 2 globals + output + 9 per layer.
    EXPECT_EQ(f->tensors().size(), 3u + 9u * 2u);
    for (const auto& t : f->tensors()) {
      SCOPED_TRACE(t.name);
      if (t.dims.size() == 1) {
        EXPECT_EQ(t.type, DType::kF32);
        const auto [mean, sd] = tensor_moments(t);
        EXPECT_NEAR(mean, 1.0, 0.05);  // norm weights ~ 1 + N(0, 0.1)
        EXPECT_NEAR(sd, 0.1, 0.03);
        continue;
      }
      EXPECT_EQ(t.type, want);
      const auto [mean, sd] = tensor_moments(t);
      EXPECT_NEAR(mean, 0.0, 0.002);
      // Coarse types lose some spread; none should lose more than a quarter of it.
      EXPECT_NEAR(sd, 0.02, 0.005);
    }
    const auto* q = f->find_tensor("blk.1.attn_q.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{256, 256}));
    const auto* k = f->find_tensor("blk.1.attn_k.weight");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->dims, (std::vector<int64_t>{256, 128}));
    const auto* down = f->find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->dims, (std::vector<int64_t>{256, 256}));
    std::remove(path.c_str());
  }
}

TEST(RandomModel, FileTypeMatchesLlamaCppNumbers) {
  // llama.h LLAMA_FTYPE_*: ALL_F32 0, MOSTLY_F16 1, Q4_0 2, Q8_0 7, Q5_1 9, Q4_K_M 15, Q6_K 18, BF16 32.
  EXPECT_EQ(*llama_file_type("F32"), 0u);
  EXPECT_EQ(*llama_file_type("f16"), 1u);
  EXPECT_EQ(*llama_file_type("Q4_0"), 2u);
  EXPECT_EQ(*llama_file_type("Q8_0"), 7u);
  EXPECT_EQ(*llama_file_type("Q5_1"), 9u);
  EXPECT_EQ(*llama_file_type("q4_k_m"), 15u);
  EXPECT_EQ(*llama_file_type("Q6_K"), 18u);
  EXPECT_EQ(*llama_file_type("BF16"), 32u);
  EXPECT_FALSE(llama_file_type("Q7_Z").ok());
}

TEST(RandomModel, Q4KMFollowsLlamaQuantizeMix) {
  // 8 layers: use_more_bits(i, 8) holds for i < 1, i >= 7 and (i - 1) % 3 == 2, i.e. {0, 3, 6, 7}.
  RandomModelOptions o = small_options("Q4_K_M");
  o.n_layer = 8;
  o.n_ff = 512;
  const std::string path = temp_path("q4km");
  ASSERT_TRUE(write_random_model(o, path).ok());
  auto f = open_or_die(path);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f->get_int("general.file_type"), 15);
  const std::set<int> more = {0, 3, 6, 7};
  for (int il = 0; il < 8; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const DType promoted = more.count(il) ? DType::kQ6_K : DType::kQ4_K;
    EXPECT_EQ(f->find_tensor(p + "attn_v.weight")->type, promoted) << il;
    EXPECT_EQ(f->find_tensor(p + "ffn_down.weight")->type, promoted) << il;
    EXPECT_EQ(f->find_tensor(p + "attn_k.weight")->type, DType::kQ4_K) << il;
    EXPECT_EQ(f->find_tensor(p + "ffn_up.weight")->type, DType::kQ4_K) << il;
    EXPECT_EQ(f->find_tensor(p + "attn_norm.weight")->type, DType::kF32) << il;
  }
  EXPECT_EQ(f->find_tensor("output.weight")->type, DType::kQ6_K);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, DType::kQ4_K);
  std::remove(path.c_str());
}

TEST(RandomModel, Q4KMFallsBackForRowsNotMultipleOf256) {
  // Qwen2.5-0.5B has n_embd 896: llama-quantize sends Q4_K rows of 896 to Q5_0, Q6_K ones to
  // Q8_0, and the (tied) output to Q8_0.
  RandomModelOptions o = small_options("Q4_K_M");
  o.arch = "qwen2";
  o.n_embd = 96;
  o.n_head = 3;
  o.n_head_kv = 1;
  o.n_layer = 4;
  o.tied_embeddings = true;
  o.vocab.kind = VocabKind::kBpe;
  const std::string path = temp_path("q4km_fallback");
  ASSERT_TRUE(write_random_model(o, path).ok());
  auto f = open_or_die(path);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, DType::kQ8_0);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, DType::kQ5_0);
  EXPECT_EQ(f->find_tensor("blk.3.attn_v.weight")->type, DType::kQ8_0);  // Q6_K layer
  EXPECT_EQ(f->find_tensor("blk.0.attn_v.weight")->type, DType::kQ5_0);
  EXPECT_EQ(f->find_tensor("blk.3.ffn_down.weight")->type, DType::kQ6_K);  // rows of n_ff = 256
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->type, DType::kQ4_K);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias")->type, DType::kF32);
  std::remove(path.c_str());
}

TEST(RandomModel, BytesDependOnSeedButNotOnThreads) {
  RandomModelOptions o = small_options("Q4_K");
  o.n_threads = 1;
  const std::string a = temp_path("det_a"), b = temp_path("det_b"), c = temp_path("det_c");
  ASSERT_TRUE(write_random_model(o, a).ok());
  o.n_threads = 3;
  ASSERT_TRUE(write_random_model(o, b).ok());
  o.seed = 8;
  ASSERT_TRUE(write_random_model(o, c).ok());
  const auto ba = read_bytes(a), bb = read_bytes(b), bc = read_bytes(c);
  EXPECT_FALSE(ba.empty());
  EXPECT_EQ(ba, bb);
  EXPECT_NE(ba, bc);
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(RandomModel, TinyPresetsHaveTheirArchitectureFeatures) {
  for (const char* name_c : {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}) {
    const std::string name = name_c;
    SCOPED_TRACE(name);
    auto o = random_model_preset(name);
    ASSERT_TRUE(o.ok());
    for (const std::string type : {"Q8_0", "Q4_K_M"}) {
      o->weight_type = type;
      const std::string path = temp_path(name + "_" + type);
      ASSERT_TRUE(write_random_model(*o, path).ok());
      auto f = open_or_die(path);
      ASSERT_NE(f, nullptr);
      const std::string arch = *f->get_string("general.architecture");
      EXPECT_EQ(arch, name == "tiny-qwen2" ? "qwen2" : name == "tiny-qwen3" ? "qwen3" : "llama");
      EXPECT_EQ(f->has("llama.attention.sliding_window"), name == "tiny-mistral");
      EXPECT_EQ(f->find_tensor("rope_freqs.weight") != nullptr, name == "tiny-llama");
      EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias") != nullptr, name == "tiny-qwen2");
      EXPECT_EQ(f->find_tensor("blk.3.attn_k_norm.weight") != nullptr, name == "tiny-qwen3");
      EXPECT_EQ(f->find_tensor("output.weight") == nullptr, arch != "llama");
      const auto* q = f->find_tensor("blk.0.attn_q.weight");
      ASSERT_NE(q, nullptr);
      const int64_t head_dim = *f->get_int_or(arch + ".attention.key_length",
                                              *f->get_int(arch + ".embedding_length") /
                                                  *f->get_int(arch + ".attention.head_count"));
      EXPECT_EQ(q->dims[1], head_dim * *f->get_int(arch + ".attention.head_count"));
      if (name == "tiny-qwen3") {
        EXPECT_EQ(head_dim, 128);
      }
      if (type == "Q8_0") {
        EXPECT_EQ(q->type, DType::kQ8_0);
      }
      std::remove(path.c_str());
    }
  }
}

TEST(RandomModel, RopeFreqsFollowTheLlama3Formula) {
  auto o = random_model_preset("tiny-llama");
  ASSERT_TRUE(o.ok());
  const std::string path = temp_path("rope_freqs");
  ASSERT_TRUE(write_random_model(*o, path).ok());
  auto f = open_or_die(path);
  ASSERT_NE(f, nullptr);
  const auto* t = f->find_tensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->dims, (std::vector<int64_t>{32}));
  const auto* v = reinterpret_cast<const float*>(t->data);
  // head_dim 64, theta 1e4, factor 8, low 1, high 4, original context 8192: wavelength
  // 2 pi 1e4^(i/32) is below 2048 up to i = 20 (factor 1) and above 8192 from i = 25 (factor 8);
  // at i = 22 it is 3533.29, smooth = (8192 / 3533.29 - 1) / 3, factor 1 / ((1 - smooth) / 8 + smooth).
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[20], 1.0f);
  EXPECT_NEAR(v[22], 1.96245, 1e-4);
  EXPECT_FLOAT_EQ(v[25], 8.0f);
  EXPECT_FLOAT_EQ(v[31], 8.0f);
  for (int i = 1; i < 32; ++i) EXPECT_GE(v[i], v[i - 1]);
  std::remove(path.c_str());
}

TEST(RandomModel, RejectsBadOptionsWithAMessage) {
  RandomModelOptions o = small_options("Q4_K");
  o.arch = "gpt5";
  Status st = write_random_model(o, temp_path("bad"));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gpt5"), std::string::npos);
  o = small_options("Q9_9");
  EXPECT_EQ(write_random_model(o, temp_path("bad")).code(), ErrorCode::kInvalidArgument);
  o = small_options("F32");
  o.n_head_kv = 3;
  EXPECT_EQ(write_random_model(o, temp_path("bad")).code(), ErrorCode::kInvalidArgument);
  o = small_options("F32");
  o.arch = "qwen2";
  o.sliding_window = 8;  // llama and mistral shapes only
  EXPECT_EQ(write_random_model(o, temp_path("bad")).code(), ErrorCode::kInvalidArgument);
  o = small_options("F32");
  o.sliding_window = -1;
  EXPECT_EQ(write_random_model(o, temp_path("bad")).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(random_model_preset("nope").status().code(), ErrorCode::kNotFound);
}

TEST(RandomModel, FullSizePresetsHaveThePublishedShapes) {
  auto t = random_model_preset("tinyllama-1.1b");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->n_embd, 2048);
  EXPECT_EQ(t->n_layer, 22);
  EXPECT_EQ(t->n_head_kv, 4);
  EXPECT_EQ(t->n_ff, 5632);
  EXPECT_EQ(t->n_vocab, 32000);
  auto q = random_model_preset("qwen2.5-0.5b", "/x");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->n_embd, 896);
  EXPECT_EQ(q->n_head, 14);
  EXPECT_EQ(q->n_head_kv, 2);
  EXPECT_TRUE(q->tied_embeddings);
  EXPECT_EQ(q->vocab.copy_from, "/x/vocab-qwen2.gguf");
  auto l = random_model_preset("llama3.1-8b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->n_ff, 14336);
  EXPECT_EQ(l->n_vocab, 128256);
  EXPECT_TRUE(l->rope_freqs);
  EXPECT_EQ(random_model_preset_names().size(), 7u);
}

TEST(RandomModel, CopiesAVocabularyFromAnotherFile) {
  const std::string src = std::string(FRUGAL_SHARED_MODELS_DIR) + "/vocab-qwen2.gguf";
  RandomModelOptions o;
  o.arch = "qwen2";
  o.n_embd = 64;
  o.n_head = 2;
  o.n_head_kv = 1;
  o.n_layer = 1;
  o.n_ff = 64;
  o.n_vocab = 0;
  o.tied_embeddings = true;
  o.weight_type = "Q8_0";
  o.vocab.kind = VocabKind::kCopy;
  o.vocab.copy_from = src;
  const std::string path = temp_path("copy_vocab");
  ASSERT_TRUE(write_random_model(o, path).ok());
  auto f = open_or_die(path);
  auto s = open_or_die(src);
  ASSERT_TRUE(f && s);
  const auto tokens = *f->get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens, *s->get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(*f->get_string_array("tokenizer.ggml.merges"), *s->get_string_array("tokenizer.ggml.merges"));
  EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f->find_tensor("token_embd.weight")->dims[1], static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(*f->get_int("qwen2.vocab_size"), static_cast<int64_t>(tokens.size()));
  o.n_vocab = 1000;  // disagrees with the copied vocabulary
  EXPECT_EQ(write_random_model(o, path).code(), ErrorCode::kInvalidArgument);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace frugal::synth
