#include "frugal/tokenize/vocab.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "frugal/tokenize/unicode.h"

namespace frugal {
namespace {

constexpr const char* kSpaceEscape = "\xE2\x96\x81";  // U+2581, SPM's visible space

// GPT-2's byte map: printable Latin-1 bytes stand for themselves, the other 68 bytes take the
// code points from U+0100 upwards in byte order.
struct ByteMap {
  std::array<uint32_t, 256> to_cpt{};
  std::array<int16_t, 324> to_byte{};  // every mapped code point is below 256 + 68
  ByteMap() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cpt[b] = printable ? b : next++;
      to_byte[to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

struct PreTokenizerInfo {
  const char* name;
  PreTokenizerKind kind;
  bool ignore_merges;
  bool add_bos;
  bool clean_spaces;
};

// The tokenizer.ggml.pre values whose llama.cpp behaviour this file reproduces in full.
constexpr PreTokenizerInfo kPreTokenizers[] = {
    {"default", PreTokenizerKind::kDefault, false, false, true},
    {"llama3", PreTokenizerKind::kLlama3, true, true, true},
    {"llama-v3", PreTokenizerKind::kLlama3, true, true, true},
    {"llama-bpe", PreTokenizerKind::kLlama3, true, true, true},
    {"falcon3", PreTokenizerKind::kLlama3, true, true, true},
    {"dbrx", PreTokenizerKind::kLlama3, false, false, true},
    {"smaug-bpe", PreTokenizerKind::kLlama3, false, false, true},
    {"qwen2", PreTokenizerKind::kQwen2, false, false, false},
    {"deepseek-r1-qwen", PreTokenizerKind::kQwen2, false, false, false},
    {"stablelm2", PreTokenizerKind::kQwen2, false, false, true},
    {"megrez", PreTokenizerKind::kQwen2, false, false, true},
    {"gpt-2", PreTokenizerKind::kGpt2, false, false, true},
    {"phi-2", PreTokenizerKind::kGpt2, false, false, true},
    {"mpt", PreTokenizerKind::kGpt2, false, false, true},
    {"olmo", PreTokenizerKind::kGpt2, false, false, true},
    {"jais", PreTokenizerKind::kGpt2, false, false, true},
};

uint32_t attr_of_type(int32_t type) {
  switch (static_cast<GgufTokenType>(type)) {
    case GgufTokenType::kUnknown: return kAttrUnknown;
    case GgufTokenType::kUnused: return kAttrUnused;
    case GgufTokenType::kNormal: return kAttrNormal;
    case GgufTokenType::kControl: return kAttrControl;
    case GgufTokenType::kUserDefined: return kAttrUserDefined;
    case GgufTokenType::kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

Status choose_type(const VocabSpec& spec, Vocab& v) {
  if (spec.model == "llama") {
    v.type = Vocab::Type::kSpm;
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = true, v.add_bos = true, v.add_eos = false;
  } else if (spec.model == "gpt2") {
    v.type = Vocab::Type::kBpe;
    v.bos = 11, v.eos = 11, v.unk = -1;
    const std::string pre = spec.pre.empty() ? "default" : spec.pre;
    auto it = std::find_if(std::begin(kPreTokenizers), std::end(kPreTokenizers),
                           [&](const PreTokenizerInfo& p) { return pre == p.name; });
    if (it == std::end(kPreTokenizers)) {
      return error(ErrorCode::kNotSupported, "tokenizer.ggml.pre: pre-tokenizer '{}' is not supported", pre);
    }
    v.pre = it->kind;
    v.ignore_merges = it->ignore_merges;
    v.add_bos = it->add_bos;
    v.clean_spaces = it->clean_spaces;
  } else {
    return error(ErrorCode::kNotSupported, "tokenizer.ggml.model: tokenizer '{}' is not supported (llama, gpt2)",
                 spec.model);
  }
  if (spec.add_space_prefix) v.add_space_prefix = *spec.add_space_prefix;
  return ok_status();
}

Status load_tokens(VocabSpec& spec, Vocab& v) {
  const size_t n = spec.tokens.size();
  if (n == 0) return error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens: empty vocabulary");
  if (n > size_t(INT32_MAX)) return error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens: {} tokens is too many", n);
  if (!spec.scores.empty() && spec.scores.size() < n) {
    return error(ErrorCode::kCorrupt, "tokenizer.ggml.scores: {} scores for {} tokens", spec.scores.size(), n);
  }
  if (!spec.token_types.empty() && spec.token_types.size() < n) {
    return error(ErrorCode::kCorrupt, "tokenizer.ggml.token_type: {} types for {} tokens", spec.token_types.size(), n);
  }
  v.text = std::move(spec.tokens);
  v.score.assign(n, 0.0f);
  v.attr.assign(n, kAttrNormal);
  v.index.build(&v.text);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so that every text maps back to one id.
    if (v.text[i].empty()) v.text[i] = "[EMPTY_" + std::to_string(i) + "]";
    if (!spec.scores.empty()) v.score[i] = spec.scores[i];
    if (!spec.token_types.empty()) v.attr[i] = attr_of_type(spec.token_types[i]);
    const TokenId dup = v.index.insert(static_cast<TokenId>(i));
    if (dup >= 0) {
      return error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens: duplicate token '{}' at ids {} and {}", v.text[i], dup, i);
    }
  }
  return ok_status();
}

void load_merges(std::span<const std::string> lines, Vocab& v) {
  v.merges.reserve(lines.size());
  std::string joined;
  for (size_t rank = 0; rank < lines.size(); ++rank) {
    const std::string& line = lines[rank];
    const size_t pos = line.find(' ', 1);
    if (pos == std::string::npos) continue;  // can never match two non-empty symbols
    const std::string_view left(line.data(), pos);
    const std::string_view right(line.data() + pos + 1, line.size() - pos - 1);
    const TokenId l = v.find(left), r = v.find(right);
    joined.assign(left);
    joined.append(right);
    const TokenId result = v.find(joined);
    if (l >= 0 && r >= 0) {
      v.merges.insert(l, r, {static_cast<int32_t>(rank), result});
    } else {
      v.text_merges.emplace(line, static_cast<int32_t>(rank));
    }
  }
}

// Special ids from the metadata; ids outside the vocabulary keep the default (as llama.cpp),
// and defaults outside the vocabulary are dropped.
void load_special_ids(const VocabSpec& spec, Vocab& v) {
  const int64_t n = v.n_tokens();
  auto set = [&](const std::optional<int64_t>& from, TokenId& id) {
    if (from && *from >= 0 && *from < n) id = static_cast<TokenId>(*from);
    if (id >= n) id = -1;
  };
  set(spec.bos_id, v.bos);
  set(spec.eos_id, v.eos);
  set(spec.eot_id, v.eot);
  set(spec.eom_id, v.eom);
  set(spec.unk_id, v.unk);
  set(spec.fim_pad_id, v.fim_pad);
  set(spec.fim_rep_id, v.fim_rep);
  set(spec.fim_sep_id, v.fim_sep);
  if (spec.add_bos) v.add_bos = *spec.add_bos;
  if (spec.add_eos) v.add_eos = *spec.add_eos;
}

// llama.cpp finds the end-of-turn, end-of-message and FIM tokens by their text when the metadata
// does not name them, marks them control tokens, and collects every end-of-generation token.
void detect_special_tokens(Vocab& v) {
  // llama.cpp takes whichever candidate its hash map yields first; the first in list order is a
  // deterministic choice that agrees with it on the common vocabularies (<|im_end|> before
  // <|endoftext|> for Qwen).
  auto first_of = [&](std::initializer_list<const char*> texts) -> TokenId {
    for (const char* t : texts) {
      const TokenId id = v.find(t);
      if (id < 0) continue;
      if (!(v.attr[id] & kAttrControl)) v.attr[id] = kAttrControl;
      return id;
    }
    return -1;
  };
  if (v.eot < 0) {
    v.eot = first_of({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
                      "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"});
  }
  if (v.eom < 0) v.eom = first_of({"<|eom_id|>"});
  first_of({"<|fim_prefix|>", "<fim-prefix>", "<PRE>"});
  first_of({"<|fim_suffix|>", "<fim-suffix>", "<SUF>"});
  first_of({"<|fim_middle|>", "<fim-middle>", "<MID>"});
  if (v.fim_pad < 0) v.fim_pad = first_of({"<|fim_pad|>", "<fim-pad>", "<PAD>"});
  if (v.fim_rep < 0) v.fim_rep = first_of({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"});
  if (v.fim_sep < 0) v.fim_sep = first_of({"<|file_sep|>"});

  for (TokenId id : {v.fim_pad, v.fim_rep, v.fim_sep, v.eos, v.eot, v.eom}) {
    if (id >= 0) v.eog.insert(id);
  }
  for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                        "<EOT>"}) {
    const TokenId id = v.find(t);
    if (id < 0) continue;
    v.eog.insert(id);
    if (!(v.attr[id] & kAttrControl)) v.attr[id] = kAttrControl;
  }

  for (TokenId id = 0; id < v.n_tokens(); ++id) {
    if (v.attr[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_tokens.push_back(id);
  }
  std::stable_sort(v.special_tokens.begin(), v.special_tokens.end(),
                   [&](TokenId a, TokenId b) { return v.text[a].size() > v.text[b].size(); });
}

std::string spm_piece(const Vocab& v, TokenId id) {
  const uint32_t a = v.attr[id];
  const std::string& t = v.text[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (a & kAttrNormal) {
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpaceEscape) == 0) {
        out.push_back(' ');
        i += 3;
      } else {
        out.push_back(t[i++]);
      }
    }
    return out;
  }
  if (a & kAttrByte) {
    // "<0xXX>"
    if (t.size() < 5) return {};
    return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
  }
  return {};
}

std::string bpe_piece(const Vocab& v, TokenId id) {
  const uint32_t a = v.attr[id];
  const std::string& t = v.text[id];
  if (a & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t;
  if (!(a & kAttrNormal)) return {};
  std::string out;
  for (size_t i = 0; i < t.size();) {
    size_t len = 0;
    if (unicode::next_utf8(std::string_view(t).substr(i), len) != unicode::Utf8Step::kComplete) {
      out.push_back(t[i++]);  // ill-formed token text: pass the byte through
      continue;
    }
    const char* p = t.data() + i;
    const int b = unicode_to_byte(unicode::decode_utf8(p));
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      // llama.cpp's marker for a character outside the byte map.
      out += "[UNK_BYTE_0x";
      for (size_t k = 0; k < len; ++k) out += fmt::format("{:02x}", static_cast<uint8_t>(t[i + k]));
      out += t + "]";
    }
    i += len;
  }
  return out;
}

void build_byte_tables(Vocab& v) {
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    std::string enc;
    unicode::append_utf8(enc, byte_to_unicode(static_cast<uint8_t>(b)));
    v.byte_char_token[b] = v.find(enc);
    v.raw_byte_token[b] = v.find(std::string(1, static_cast<char>(b)));
    const char hex[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
    TokenId id = v.find(hex);
    // llama.cpp falls back to the one-character token (an empty string for byte 0).
    if (id < 0) id = b == 0 ? -1 : v.raw_byte_token[b];
    v.spm_byte_token[b] = id;
  }
}

}  // namespace

uint64_t TokenIndex::hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

void TokenIndex::build(const std::vector<std::string>* texts) {
  texts_ = texts;
  size_t n = 16;
  while (n < 2 * texts->size()) n *= 2;
  slots_.assign(n, Slot{0, -1});
}

TokenId TokenIndex::insert(TokenId id) {
  const std::string& s = (*texts_)[id];
  const uint64_t h = hash(s);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
    Slot& slot = slots_[i];
    if (slot.id < 0) {
      slot = {tag, id};
      return -1;
    }
    if (slot.tag == tag && (*texts_)[slot.id] == s) return slot.id;
  }
}

TokenId TokenIndex::find(std::string_view s) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(s);
  const auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.tag == tag && (*texts_)[slot.id] == s) return slot.id;
  }
}

void MergeTable::reserve(size_t n) {
  size_t size = 16;
  shift_ = 60;
  while (size < 2 * n) size *= 2, --shift_;
  slots_.assign(size, Slot{});
}

void MergeTable::insert(TokenId left, TokenId right, Merge m) {
  const uint64_t key = make_key(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
    Slot& s = slots_[i];
    if (s.key == key) return;
    if (s.key == kEmpty) {
      s = {key, m};
      return;
    }
  }
}

uint32_t byte_to_unicode(uint8_t b) { return byte_map().to_cpt[b]; }

int unicode_to_byte(uint32_t cpt) {
  const ByteMap& m = byte_map();
  return cpt < m.to_byte.size() ? m.to_byte[cpt] : -1;
}

Result<std::unique_ptr<Vocab>> build_vocab(VocabSpec spec) {
  auto v = std::make_unique<Vocab>();
  FRUGAL_RETURN_IF_ERROR(choose_type(spec, *v));
  FRUGAL_RETURN_IF_ERROR(load_tokens(spec, *v));
  if (v->type == Vocab::Type::kBpe) {
    if (spec.merges.empty()) return error(ErrorCode::kCorrupt, "tokenizer.ggml.merges: missing for a BPE vocabulary");
    load_merges(spec.merges, *v);
  }
  load_special_ids(spec, *v);
  if (v->add_bos && v->bos < 0) {
    return error(ErrorCode::kCorrupt, "tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  if (v->add_eos && v->eos < 0) {
    return error(ErrorCode::kCorrupt, "tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set");
  }
  detect_special_tokens(*v);
  build_byte_tables(*v);
  v->piece.resize(v->text.size());
  for (TokenId id = 0; id < v->n_tokens(); ++id) {
    v->piece[id] = v->type == Vocab::Type::kSpm ? spm_piece(*v, id) : bpe_piece(*v, id);
  }
  return v;
}

}  // namespace frugal
