#include "frugal/tokenize/tokenizer.h"

#include "frugal/format/gguf.h"
#include "frugal/tokenize/unicode.h"
#include "frugal/tokenize/vocab.h"

namespace frugal {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// A piece of the input: raw text [begin, end), or one special token cut out of it.
struct Fragment {
  TokenId token;  // -1 for text
  uint32_t begin, end;
};

// llama.cpp's clean-up after detokenizing (clean_spaces), three passes in its order.
// 1: drop a space before ? ! . ,
std::string drop_space_before_punctuation(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  }
  return out;
}

// 2: " ' " becomes "'". The character after the dropped second space does not count as having a
// space before it.
std::string join_lone_apostrophes(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  bool after_skip = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    const bool space_before = i > 0 && !after_skip && in[i - 1] == ' ';
    after_skip = false;
    if (x == '\'' && space_before && i + 1 < in.size() && in[i + 1] == ' ') {
      out.pop_back();
      ++i;
      after_skip = true;
    }
    out.push_back(x);
  }
  return out;
}

// 3: drop the space before the contractions 's 'm 're 've (not 't 'd 'll).
std::string join_contractions(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && x == '\'' && i + 1 < in.size()) {
      const char x1 = in[i + 1];
      const char x2 = i + 2 < in.size() ? in[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || ((x1 == 'r' || x1 == 'v') && x2 == 'e')) out.pop_back();
    }
    out.push_back(x);
  }
  return out;
}

class VocabTokenizer final : public Tokenizer {
 public:
  explicit VocabTokenizer(std::unique_ptr<Vocab> vocab, std::string chat_template) : v_(std::move(vocab)) {
    bos_ = v_->bos;
    eos_ = v_->eos;
    eot_ = v_->eot;
    add_bos_ = v_->add_bos;
    add_space_prefix_ = v_->add_space_prefix;
    chat_template_ = std::move(chat_template);
  }

  Result<std::vector<TokenId>> encode(std::string_view text, const TokenizeOptions& opts) const override {
    if (const size_t bad = unicode::find_invalid_utf8(text); bad != std::string_view::npos) {
      return error(ErrorCode::kInvalidArgument, "text is not valid UTF-8: byte 0x{:02X} at byte offset {}",
                   static_cast<uint8_t>(text[bad]), bad);
    }
    if (text.size() > UINT32_MAX) {
      return error(ErrorCode::kInvalidArgument, "text of {} bytes is too long to tokenize", text.size());
    }
    const std::vector<Fragment> fragments = partition(text, opts.parse_special);
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 2);
    if (opts.add_special && v_->add_bos) out.push_back(v_->bos);
    if (v_->type == Vocab::Type::kSpm) {
      encode_spm(text, fragments, out);
    } else {
      for (const Fragment& f : fragments) {
        if (f.token >= 0) {
          out.push_back(f.token);
        } else {
          bpe_tokenize(*v_, text.substr(f.begin, f.end - f.begin), out);
        }
      }
    }
    if (opts.add_special && v_->add_eos) out.push_back(v_->eos);
    return out;
  }

  std::string piece(TokenId id, bool special) const override {
    if (id < 0 || id >= v_->n_tokens()) return {};
    if (!special && (v_->attr[id] & (kAttrUnknown | kAttrControl))) return {};
    return v_->piece[id];
  }

  std::string detokenize(const std::vector<TokenId>& ids, bool remove_special, bool unparse_special) const override {
    size_t begin = 0, end = ids.size();
    bool strip = v_->add_space_prefix;
    if (remove_special && v_->add_bos && end > 0 && ids[0] == v_->bos) {
      strip = false;  // llama.cpp keeps the space when it drops the BOS
      begin = 1;
    }
    if (remove_special && v_->add_eos && end > begin && ids[end - 1] == v_->eos) --end;
    std::string text;
    for (size_t i = begin; i < end; ++i) {
      const std::string p = piece(ids[i], unparse_special);
      text.append(p, strip && !p.empty() && p[0] == ' ' ? 1 : 0);
      strip = false;
    }
    if (!v_->clean_spaces) return text;
    return join_contractions(join_lone_apostrophes(drop_space_before_punctuation(text)));
  }

  int32_t n_vocab() const override { return v_->n_tokens(); }
  bool is_eog(TokenId id) const override { return v_->eog.count(id) > 0; }
  bool is_control(TokenId id) const override {
    return id >= 0 && id < v_->n_tokens() && (v_->attr[id] & kAttrControl);
  }

 private:
  // Cuts special-token texts out of the input, longest token first, every occurrence of each.
  // Control and unknown tokens only when parse_special; user-defined tokens always.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const {
    std::vector<Fragment> frags;
    if (!text.empty()) frags.push_back({-1, 0, static_cast<uint32_t>(text.size())});
    std::vector<Fragment> next;
    for (TokenId id : v_->special_tokens) {
      if (!parse_special && (v_->attr[id] & (kAttrControl | kAttrUnknown))) continue;
      const std::string& needle = v_->text[id];
      next.clear();
      for (const Fragment& f : frags) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        uint32_t pos = f.begin;
        const std::string_view hay = text.substr(0, f.end);
        for (size_t m; (m = hay.find(needle, pos)) != std::string_view::npos;) {
          if (m > pos) next.push_back({-1, pos, static_cast<uint32_t>(m)});
          next.push_back({id, 0, 0});
          pos = static_cast<uint32_t>(m + needle.size());
        }
        if (pos < f.end) next.push_back({-1, pos, f.end});
      }
      frags.swap(next);
    }
    return frags;
  }

  void encode_spm(std::string_view text, const std::vector<Fragment>& fragments, std::vector<TokenId>& out) const {
    bool prev_special = true;  // the text is prefixed with a space as if it followed a special token
    std::string escaped;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (v_->add_space_prefix && prev_special) escaped += "\xE2\x96\x81";
      for (char c : text.substr(f.begin, f.end - f.begin)) {
        if (c == ' ') {
          escaped += "\xE2\x96\x81";
        } else {
          escaped.push_back(c);
        }
      }
      spm_tokenize(*v_, escaped, out);
      prev_special = false;
    }
  }

  std::unique_ptr<Vocab> v_;
};

template <typename T>
Status read_optional_int(const GgufFile& f, const char* key, std::optional<T>& out) {
  if (!f.has(key)) return ok_status();
  FRUGAL_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  out = v;
  return ok_status();
}

Status read_optional_bool(const GgufFile& f, const char* key, std::optional<bool>& out) {
  if (!f.has(key)) return ok_status();
  FRUGAL_ASSIGN_OR_RETURN(bool v, f.get_bool(key));
  out = v;
  return ok_status();
}

Result<VocabSpec> read_spec(const GgufFile& f) {
  VocabSpec s;
  FRUGAL_ASSIGN_OR_RETURN(s.model, f.get_string("tokenizer.ggml.model"));
  FRUGAL_ASSIGN_OR_RETURN(s.pre, f.get_string_or("tokenizer.ggml.pre", ""));
  FRUGAL_ASSIGN_OR_RETURN(s.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (f.has("tokenizer.ggml.scores")) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<double> scores, f.get_float_array("tokenizer.ggml.scores"));
    s.scores.assign(scores.begin(), scores.end());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    FRUGAL_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array("tokenizer.ggml.token_type"));
    s.token_types.reserve(types.size());
    for (int64_t t : types) s.token_types.push_back(static_cast<int32_t>(t));
  }
  if (const GgufValue* merges = f.find("tokenizer.ggml.merges")) {
    // Read in place: the merges are only scanned once, copying them would double the load time.
    if (merges->type != GgufType::kArray || merges->elem_type != GgufType::kString) {
      return error(ErrorCode::kCorrupt, "tokenizer.ggml.merges: expected an array of strings, found {}",
                   gguf_type_name(merges->type));
    }
    s.merges = merges->strings;
  }
  const std::pair<const char*, std::optional<int64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &s.bos_id},         {"tokenizer.ggml.eos_token_id", &s.eos_id},
      {"tokenizer.ggml.eot_token_id", &s.eot_id},         {"tokenizer.ggml.eom_token_id", &s.eom_id},
      {"tokenizer.ggml.unknown_token_id", &s.unk_id},     {"tokenizer.ggml.seperator_token_id", &s.sep_id},
      {"tokenizer.ggml.padding_token_id", &s.pad_id},     {"tokenizer.ggml.fim_pre_token_id", &s.fim_pre_id},
      {"tokenizer.ggml.fim_suf_token_id", &s.fim_suf_id}, {"tokenizer.ggml.fim_mid_token_id", &s.fim_mid_id},
      {"tokenizer.ggml.fim_pad_token_id", &s.fim_pad_id}, {"tokenizer.ggml.fim_rep_token_id", &s.fim_rep_id},
      {"tokenizer.ggml.fim_sep_token_id", &s.fim_sep_id},
  };
  for (const auto& [key, field] : ids) FRUGAL_RETURN_IF_ERROR(read_optional_int(f, key, *field));
  FRUGAL_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_bos_token", s.add_bos));
  FRUGAL_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_eos_token", s.add_eos));
  FRUGAL_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_space_prefix", s.add_space_prefix));
  FRUGAL_ASSIGN_OR_RETURN(s.chat_template, f.get_string_or("tokenizer.chat_template", ""));
  return s;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_tokenizer(VocabSpec spec) {
  std::string chat_template = std::move(spec.chat_template);
  FRUGAL_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> vocab, build_vocab(std::move(spec)));
  return std::unique_ptr<Tokenizer>(std::make_unique<VocabTokenizer>(std::move(vocab), std::move(chat_template)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& file) {
  auto spec = read_spec(file);
  if (!spec.ok()) return spec.status().with_context(file.path());
  auto tok = make_tokenizer(std::move(spec).value());
  if (!tok.ok()) return tok.status().with_context(file.path());
  return tok;
}

std::string Detokenizer::push(TokenId id) {
  std::string p = tok_.piece(id, special_);
  // llama.cpp's detokenize drops the space that add_space_prefix put before the text from the
  // first piece, whatever that token is (a BOS rendered as nothing uses the chance up).
  if (first_) {
    first_ = false;
    if (tok_.add_space_prefix() && !p.empty() && p[0] == ' ') p.erase(0, 1);
  }
  pending_ += p;
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    size_t len = 0;
    const auto step = unicode::next_utf8(std::string_view(pending_).substr(i), len);
    if (step == unicode::Utf8Step::kIncomplete) break;
    if (step == unicode::Utf8Step::kComplete) {
      out.append(pending_, i, len);
    } else {
      out += kReplacementChar;
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string Detokenizer::finish() {
  std::string out;
  if (!pending_.empty()) out = kReplacementChar;  // a character cut off by the end of the stream
  pending_.clear();
  first_ = strip_first_;
  return out;
}

}  // namespace frugal
