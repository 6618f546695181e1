#include "frugal/synth/synth_vocab.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>

#include "frugal/synth/random_model.h"

namespace frugal::synth {
namespace {

size_t utf8_length(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// Splits "left right" at its one space (neither side can hold a space in a byte-level vocab).
std::pair<std::string, std::string> split_merge(const std::string& m) {
  const size_t sp = m.find(' ');
  EXPECT_NE(sp, std::string::npos) << m;
  EXPECT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
  return {m.substr(0, sp), m.substr(sp + 1)};
}

TEST(SynthVocab, SpmHasLlamaLayoutAndReachablePieces) {
  for (int64_t n : {260, 512, 32000}) {
    SCOPED_TRACE(n);
    auto r = make_spm_vocab(n, 1);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const SynthVocab& v = *r;
    ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n);
    ASSERT_EQ(v.scores.size(), v.tokens.size());
    ASSERT_EQ(v.token_types.size(), v.tokens.size());
    EXPECT_EQ(v.model, "llama");
    EXPECT_EQ(v.tokens[0], "<unk>");
    EXPECT_EQ(v.token_types[0], 2);
    EXPECT_EQ(v.tokens[1], "<s>");
    EXPECT_EQ(v.tokens[2], "</s>");
    EXPECT_EQ(v.token_types[2], 3);
    EXPECT_EQ(v.tokens[3], "<0x00>");
    EXPECT_EQ(v.tokens[3 + 0x41], "<0x41>");
    EXPECT_EQ(v.tokens[258], "<0xFF>");
    EXPECT_EQ(v.token_types[258], 6);
    EXPECT_EQ(v.bos_id, 1);
    EXPECT_EQ(v.eos_id, 2);
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      EXPECT_TRUE(index.emplace(v.tokens[i], i).second) << "duplicate " << v.tokens[i];
    }
    for (size_t i = 260; i < v.tokens.size(); ++i) EXPECT_LT(v.scores[i], v.scores[i - 1]);
    // Every piece of several characters splits into two pieces that exist and score higher
    // (merged earlier), so the SPM merge loop can build it.
    size_t multi = 0;
    for (size_t i = 259; i < v.tokens.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (utf8_length(t) == 1) continue;
      ++multi;
      bool found = false;
      for (size_t cut = 1; cut < t.size() && !found; ++cut) {
        auto a = index.find(t.substr(0, cut));
        auto b = index.find(t.substr(cut));
        found = a != index.end() && b != index.end() && a->second >= 259 && b->second >= 259;
      }
      EXPECT_TRUE(found) << t;
    }
    if (n >= 512) {
      EXPECT_GT(multi, static_cast<size_t>(n - 259) * 3 / 4);  // few single characters
      EXPECT_TRUE(index.count("\xE2\x96\x81the")) << "a real vocabulary learns '_the' early";
    }
  }
  EXPECT_FALSE(make_spm_vocab(259, 1).ok());
}

TEST(SynthVocab, Gpt2AlphabetIsAByteBijection) {
  const auto& a = gpt2_byte_alphabet();
  ASSERT_EQ(a.size(), 256u);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 256u);
  EXPECT_EQ(a['A'], "A");
  EXPECT_EQ(a[' '], "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(a['\n'], "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(a[0], "\xC4\x80");     // U+0100
  EXPECT_EQ(a[0xAD], "\xC5\x83");  // soft hyphen: U+0143, the last one remapped
}

TEST(SynthVocab, BpeMergesBuildEveryTokenInOrder) {
  for (const std::string pre : {"qwen2", "llama-bpe"}) {
    for (int64_t n : {300, 512, 8000}) {
      SCOPED_TRACE(pre + " " + std::to_string(n));
      auto r = make_bpe_vocab(n, pre, 3);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      const SynthVocab& v = *r;
      ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), n);
      EXPECT_EQ(v.model, "gpt2");
      EXPECT_EQ(v.pre, pre);
      // Real byte-level vocabularies start with '!' '"' '#' (GPT-2's byte order).
      EXPECT_EQ(v.tokens[0], "!");
      EXPECT_EQ(v.tokens[1], "\"");
      std::set<std::string> seen;
      for (const auto& t : v.tokens) EXPECT_TRUE(seen.insert(t).second) << "duplicate " << t;
      const size_t n_special = v.token_types.size() -
                               static_cast<size_t>(std::count(v.token_types.begin(), v.token_types.end(), 1));
      ASSERT_EQ(v.merges.size(), v.tokens.size() - 256 - n_special);
      std::set<std::string> known(v.tokens.begin(), v.tokens.begin() + 256);
      for (size_t i = 0; i < v.merges.size(); ++i) {
        const auto [a, b] = split_merge(v.merges[i]);
        EXPECT_TRUE(known.count(a) && known.count(b)) << v.merges[i];
        EXPECT_EQ(v.tokens[256 + i], a + b);
        known.insert(a + b);
      }
      for (size_t i = 256 + v.merges.size(); i < v.tokens.size(); ++i) EXPECT_EQ(v.token_types[i], 3);
      if (pre == "qwen2") {
        EXPECT_EQ(v.tokens[static_cast<size_t>(v.bos_id)], "<|endoftext|>");
        EXPECT_EQ(v.tokens[static_cast<size_t>(v.eos_id)], "<|im_end|>");
        EXPECT_FALSE(v.add_bos);
      } else {
        EXPECT_EQ(v.tokens[static_cast<size_t>(v.bos_id)], "<|begin_of_text|>");
        EXPECT_EQ(v.tokens[static_cast<size_t>(v.eot_id)], "<|eot_id|>");
        EXPECT_EQ(n_special, n >= 4096 ? 256u : 5u);
        EXPECT_TRUE(v.add_bos);
      }
    }
  }
  EXPECT_FALSE(make_bpe_vocab(512, "gpt4", 1).ok());
  EXPECT_FALSE(make_bpe_vocab(258, "qwen2", 1).ok());
}

TEST(SynthVocab, SameSeedSameVocabulary) {
  auto a = make_bpe_vocab(20000, "llama-bpe", 5);
  auto b = make_bpe_vocab(20000, "llama-bpe", 5);
  auto c = make_bpe_vocab(20000, "llama-bpe", 6);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->merges, b->merges);
  EXPECT_NE(a->merges, c->merges);
}

TEST(SynthVocab, WrittenKeysReadBack) {
  RandomModelOptions o;
  o.n_embd = 32;
  o.n_head = 2;
  o.n_head_kv = 1;
  o.n_layer = 1;
  o.n_ff = 32;
  o.n_vocab = 400;
  const std::string path = std::string(FRUGAL_BINARY_DIR) + "/synth_test_vocab_keys.gguf";
  ASSERT_TRUE(write_random_model(o, path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto v = make_spm_vocab(400, o.seed);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*(*f)->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*(*f)->get_string_array("tokenizer.ggml.tokens"), v->tokens);
  const auto scores = *(*f)->get_float_array("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), v->scores.size());
  for (size_t i = 0; i < scores.size(); ++i) EXPECT_EQ(scores[i], v->scores[i]);
  EXPECT_EQ(*(*f)->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*(*f)->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(*(*f)->get_int("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_TRUE(*(*f)->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_TRUE(*(*f)->get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ((*f)->find_tensor("token_embd.weight")->dims[1], 400);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace frugal::synth
