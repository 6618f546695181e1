// The vocabulary behind a Tokenizer (internal to tokenize/): token texts, scores, attributes,
// merges and special-token ids, built from GGUF metadata or, in tests, from plain vectors.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/tokenize/pretokenize.h"
#include "frugal/tokenize/tokenizer.h"

namespace frugal {

// GGUF tokenizer.ggml.token_type values (frozen by the format).
enum class GgufTokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

// Token attribute bits, as llama.cpp derives them from the token types.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// Everything the metadata says about a vocabulary; absent keys stay empty / nullopt.
struct VocabSpec {
  std::string model;  // tokenizer.ggml.model: "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;          // empty: all 0
  std::vector<int32_t> token_types;   // empty: all normal
  // "left right", rank = index. Not owned: must stay alive until build_vocab returns.
  std::span<const std::string> merges;
  std::optional<int64_t> bos_id, eos_id, eot_id, eom_id, unk_id, sep_id, pad_id;
  std::optional<int64_t> fim_pre_id, fim_suf_id, fim_mid_id, fim_pad_id, fim_rep_id, fim_sep_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;
};

// Token text -> id, open addressing over the vocabulary's own strings (no per-entry
// allocation: loading a 150k-token vocabulary stays well under a second).
class TokenIndex {
 public:
  void build(const std::vector<std::string>* texts);
  // Adds `id` (whose text is (*texts)[id]); returns the id already holding that text, or -1.
  TokenId insert(TokenId id);
  TokenId find(std::string_view s) const;

 private:
  struct Slot {
    uint32_t tag;  // high bits of the hash, to skip most string compares
    TokenId id;    // -1: empty
  };
  static uint64_t hash(std::string_view s);
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<Slot> slots_;  // power-of-two size, at most half full
};

// BPE merges keyed by (left id, right id), open addressing.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    TokenId result;  // token of the merged text, -1 if it is none
  };
  void reserve(size_t n);
  // Keeps the first merge of a pair, as llama.cpp does.
  void insert(TokenId left, TokenId right, Merge m);
  const Merge* find(TokenId left, TokenId right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = make_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t make_key(TokenId l, TokenId r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  size_t slot_of(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<Slot> slots_;
  int shift_ = 64;
};

struct Vocab {
  enum class Type { kSpm, kBpe };
  Type type = Type::kSpm;
  PreTokenizerKind pre = PreTokenizerKind::kDefault;
  bool ignore_merges = false;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool clean_spaces = false;  // detokenize removes spaces before punctuation (BPE default)

  std::vector<std::string> text;  // by id
  std::vector<float> score;
  std::vector<uint32_t> attr;     // TokenAttr bits
  std::vector<std::string> piece; // token_to_piece with special tokens rendered
  TokenIndex index;

  TokenId bos = -1, eos = -1, eot = -1, eom = -1, unk = -1;
  TokenId fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::unordered_set<TokenId> eog;
  // Control, user-defined and unknown tokens, longest text first: the order in which their
  // texts are cut out of the input before the tokenizer proper runs.
  std::vector<TokenId> special_tokens;

  MergeTable merges;
  // Merges whose halves are not both tokens, keyed by their "left right" line.
  std::unordered_map<std::string, int32_t> text_merges;
  TokenId byte_char_token[256];  // BPE: token of the byte-encoded character of each byte
  TokenId raw_byte_token[256];   // BPE: token whose text is that single raw byte (fallback)
  TokenId spm_byte_token[256];   // SPM: <0xXX> token of each byte

  TokenId find(std::string_view s) const { return index.find(s); }
  int32_t n_tokens() const { return static_cast<int32_t>(text.size()); }
};

// Validates the spec and derives everything a Vocab holds. Errors name the metadata key.
Result<std::unique_ptr<Vocab>> build_vocab(VocabSpec spec);

// The tokenizers proper, on text without special tokens. SPM takes text whose spaces are already
// escaped to U+2581; BPE takes raw text and pre-tokenizes it.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);
void bpe_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out);

// GPT-2's reversible byte <-> printable character map used by byte-level BPE vocabularies.
uint32_t byte_to_unicode(uint8_t b);
int unicode_to_byte(uint32_t cpt);  // -1 when `cpt` is not in the map

// The Tokenizer behind Tokenizer::from_gguf; tests build it from a VocabSpec directly.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(VocabSpec spec);

}  // namespace frugal
