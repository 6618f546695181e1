#include "frugal/synth/synth_vocab.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "frugal/synth/rng.h"

namespace frugal::synth {
namespace {

// Training text for the learned part of the vocabularies: plain everyday English, so that the
// learned pieces are the ones a real vocabulary starts with ("th", "the", "ing", ...).
constexpr std::string_view kCorpus =
    "Once upon a time there was a little girl who lived in a small house near the forest. "
    "Every morning she walked to the river with her dog and looked at the water and the birds. "
    "One day she found a shiny stone under a tree and she wanted to show it to her mother. "
    "Her mother was happy and said that the stone was very pretty and they should keep it. "
    "The next day the girl and her friend played in the garden and they were singing songs. "
    "They were running and jumping and laughing until the sun was going down behind the hills. "
    "When it was time to go home they said goodbye and promised to meet again the next morning. "
    "The weather was getting colder and the leaves were falling from the trees in the park. "
    "People were walking along the streets of the town and talking about the coming winter. "
    "In the evening the family ate dinner together and then they read a story about a brave king "
    "who traveled across the mountains to find the hidden treasure of an ancient kingdom. "
    "The children were listening carefully and asking many questions about the king and his horse. "
    "Learning to read and write is important because it helps people to understand each other. "
    "Scientists are working on new ways to measure the temperature of the ocean and the air. "
    "The computer program reads the input numbers, computes the result and prints the answer. "
    "She thought that nothing was impossible if you worked hard and believed in yourself. "
    "There were three cats, two dogs and one small bird living in the same building downtown. "
    "The teacher explained the lesson again and the students finally understood everything. "
    "After the rain stopped, the sky became bright and a beautiful rainbow appeared over the sea. "
    "Would you like some tea or coffee? I think I would like a glass of cold water, thank you.";

// Units of the text as the pre-tokenizers would see them: words with their leading space.
std::vector<std::string> corpus_words(std::string_view space_marker) {
  std::vector<std::string> words;
  std::string cur;
  for (char c : kCorpus) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alpha) {
      if (cur.empty()) cur = std::string(space_marker);
      cur += c;
    } else {
      if (!cur.empty()) words.push_back(cur);
      cur.clear();
      if (c != ' ') words.emplace_back(1, c);
    }
  }
  if (!cur.empty()) words.push_back(cur);
  return words;
}

// Splits UTF-8 text into characters.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

// Classic BPE training: repeatedly merge the most frequent adjacent pair (ties broken by the
// pair's text, for determinism) until `max_merges` or no pair occurs twice.
std::vector<std::pair<std::string, std::string>> train_bpe(const std::vector<std::string>& words,
                                                           size_t max_merges) {
  std::map<std::string, int> counts;
  for (const auto& w : words) counts[w]++;
  std::vector<std::pair<std::vector<std::string>, int>> seqs;
  for (const auto& [w, n] : counts) seqs.emplace_back(utf8_chars(w), n);

  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < max_merges) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [seq, n] : seqs) {
      for (size_t i = 0; i + 1 < seq.size(); ++i) pairs[{seq[i], seq[i + 1]}] += n;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;
    for (const auto& [p, n] : pairs) {
      if (n > best_count) {
        best = &p;
        best_count = n;
      }
    }
    if (best == nullptr) break;
    const auto merge = *best;
    merges.push_back(merge);
    for (auto& [seq, n] : seqs) {
      std::vector<std::string> next;
      for (size_t i = 0; i < seq.size(); ++i) {
        if (i + 1 < seq.size() && seq[i] == merge.first && seq[i + 1] == merge.second) {
          next.push_back(merge.first + merge.second);
          ++i;
        } else {
          next.push_back(seq[i]);
        }
      }
      seq = std::move(next);
    }
  }
  return merges;
}

bool is_ascii_letters(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
  }
  return true;
}

// Makes `count` new pieces left + right, left from `heads` (word starts or any piece), right from
// `tails` (letters-only pieces), skipping pieces that exist. Appends to heads/tails as it goes.
std::vector<std::pair<std::string, std::string>> synthesize_merges(
    std::vector<std::string>& heads, std::vector<std::string>& tails,
    std::unordered_set<std::string>& existing, size_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::pair<std::string, std::string>> out;
  constexpr size_t kMaxBytes = 14;
  // A tiny alphabet can run out of new pieces: give up after many misses in a row.
  size_t misses = 0;
  while (out.size() < count && misses < 100000) {
    ++misses;
    const std::string a = heads[rng.next() % heads.size()];
    // Mostly short tails (the first ones), so the pieces stay word-like.
    const size_t tail_range = rng.next() % 4 == 0 ? tails.size() : std::min<size_t>(tails.size(), 64);
    const std::string b = tails[rng.next() % tail_range];
    if (a.size() + b.size() > kMaxBytes) continue;
    std::string piece = a + b;
    if (!existing.insert(piece).second) continue;
    misses = 0;
    out.emplace_back(a, b);
    heads.push_back(piece);
    if (is_ascii_letters(piece)) tails.push_back(piece);
  }
  return out;
}

std::string byte_token(int b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2 order of the byte alphabet: printable bytes first (they map to themselves), then the
// others, mapped to 256, 257, ... in byte order.
std::vector<int> gpt2_byte_order() {
  std::vector<int> order;
  std::vector<bool> seen(256, false);
  auto add_range = [&](int lo, int hi) {
    for (int b = lo; b <= hi; ++b) {
      order.push_back(b);
      seen[b] = true;
    }
  };
  add_range('!', '~');
  add_range(0xA1, 0xAC);
  add_range(0xAE, 0xFF);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) order.push_back(b);
  }
  return order;
}

}  // namespace

const std::vector<std::string>& gpt2_byte_alphabet() {
  static const std::vector<std::string> alphabet = [] {
    std::vector<std::string> a(256);
    const std::vector<int> order = gpt2_byte_order();
    int extra = 0;
    for (int b : order) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      append_utf8(a[b], printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++));
    }
    return a;
  }();
  return alphabet;
}

Result<SynthVocab> make_spm_vocab(int64_t n_vocab, uint64_t seed) {
  if (n_vocab < 260) {
    return error(ErrorCode::kInvalidArgument, "SPM vocabulary: n_vocab {} is below the minimum 260", n_vocab);
  }
  SynthVocab v;
  v.model = "llama";
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  auto add = [&](std::string text, float score, int32_t type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) add(byte_token(b), 0.0f, 6);

  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  const std::vector<std::string> words = corpus_words(space);
  // Single characters in order of first appearance, the space marker first.
  std::vector<std::string> chars{space};
  std::unordered_set<std::string> existing{space};
  for (const auto& w : words) {
    for (auto& c : utf8_chars(w)) {
      if (existing.insert(c).second) chars.push_back(c);
    }
  }
  const size_t room = static_cast<size_t>(n_vocab) - v.tokens.size();
  if (chars.size() > room / 2) chars.resize(std::max<size_t>(1, room / 2));
  const size_t n_pieces = room - chars.size();

  // Learned pieces only over the characters kept, so every piece stays reachable.
  const std::unordered_set<std::string> kept(chars.begin(), chars.end());
  std::vector<std::string> usable;
  for (const auto& w : words) {
    bool ok = true;
    for (const auto& c : utf8_chars(w)) ok = ok && kept.count(c) > 0;
    if (ok) usable.push_back(w);
  }
  auto merges = train_bpe(usable, n_pieces);
  existing = kept;
  std::vector<std::string> heads;
  std::vector<std::string> tails;
  for (const auto& c : chars) {
    if (is_ascii_letters(c)) tails.push_back(c);
    if (is_ascii_letters(c) || c == space) heads.push_back(c);
  }
  for (const auto& [a, b] : merges) {
    existing.insert(a + b);
    heads.push_back(a + b);
    if (is_ascii_letters(a + b)) tails.push_back(a + b);
  }
  if (tails.empty()) tails.push_back(space);
  auto more = synthesize_merges(heads, tails, existing, n_pieces - merges.size(), seed);
  merges.insert(merges.end(), more.begin(), more.end());
  if (merges.size() != n_pieces) {
    return error(ErrorCode::kInvalidArgument, "SPM vocabulary: could not make {} distinct pieces", n_pieces);
  }

  float score = 0.0f;
  for (const auto& [a, b] : merges) add(a + b, score--, 1);
  for (const auto& c : chars) add(c, score--, 1);
  return v;
}

Result<SynthVocab> make_bpe_vocab(int64_t n_vocab, const std::string& pre, uint64_t seed) {
  SynthVocab v;
  v.model = "gpt2";
  v.pre = pre;
  std::vector<std::string> specials;
  if (pre == "qwen2") {
    specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  } else if (pre == "llama-bpe") {
    specials = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>"};
    // Llama 3 reserves 256 control ids; keep that when the vocabulary is large enough.
    for (int i = 0; n_vocab >= 4096 && specials.size() < 256; ++i) {
      specials.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
    }
  } else {
    return error(ErrorCode::kInvalidArgument, "BPE vocabulary: unknown pre-tokenizer '{}' (qwen2, llama-bpe)", pre);
  }
  const int64_t min_vocab = 256 + static_cast<int64_t>(specials.size()) + 1;
  if (n_vocab < min_vocab) {
    return error(ErrorCode::kInvalidArgument, "BPE vocabulary: n_vocab {} is below the minimum {}", n_vocab, min_vocab);
  }

  const auto& alphabet = gpt2_byte_alphabet();
  for (int b : gpt2_byte_order()) {
    v.tokens.push_back(alphabet[b]);
    v.token_types.push_back(1);
  }
  const size_t n_merges = static_cast<size_t>(n_vocab) - 256 - specials.size();
  const std::string space = alphabet[' '];  // "Ġ"
  auto merges = train_bpe(corpus_words(space), n_merges);
  std::unordered_set<std::string> existing(v.tokens.begin(), v.tokens.end());
  std::vector<std::string> heads{space};
  std::vector<std::string> tails;
  for (char c = 'a'; c <= 'z'; ++c) {
    heads.emplace_back(1, c);
    tails.emplace_back(1, c);
  }
  for (const auto& [a, b] : merges) {
    existing.insert(a + b);
    heads.push_back(a + b);
    if (is_ascii_letters(a + b)) tails.push_back(a + b);
  }
  auto more = synthesize_merges(heads, tails, existing, n_merges - merges.size(), seed);
  merges.insert(merges.end(), more.begin(), more.end());
  if (merges.size() != n_merges) {
    return error(ErrorCode::kInvalidArgument, "BPE vocabulary: could not make {} distinct merges", n_merges);
  }
  for (const auto& [a, b] : merges) {
    v.tokens.push_back(a + b);
    v.token_types.push_back(1);
    v.merges.push_back(a + " " + b);
  }
  const int64_t first_special = static_cast<int64_t>(v.tokens.size());
  for (const auto& s : specials) {
    v.tokens.push_back(s);
    v.token_types.push_back(3);
  }
  if (pre == "qwen2") {
    v.bos_id = first_special;      // <|endoftext|>
    v.eos_id = first_special + 2;  // <|im_end|>
    v.eot_id = first_special + 2;
    v.pad_id = first_special;
    v.add_bos = false;
  } else {
    v.bos_id = first_special;      // <|begin_of_text|>
    v.eos_id = first_special + 1;  // <|end_of_text|>
    v.eot_id = first_special + 4;  // <|eot_id|>
    v.add_bos = true;
  }
  return v;
}

void write_vocab(const SynthVocab& v, GgufWriter& w) {
  w.set_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.set_f32_array("tokenizer.ggml.scores", v.scores);
  w.set_i32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", v.merges);
  auto set_id = [&](const char* key, int64_t id) {
    if (id >= 0) w.set_u32(key, static_cast<uint32_t>(id));
  };
  set_id("tokenizer.ggml.bos_token_id", v.bos_id);
  set_id("tokenizer.ggml.eos_token_id", v.eos_id);
  set_id("tokenizer.ggml.eot_token_id", v.eot_id);
  set_id("tokenizer.ggml.unknown_token_id", v.unk_id);
  set_id("tokenizer.ggml.padding_token_id", v.pad_id);
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  if (v.model == "llama") w.set_bool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
}

}  // namespace frugal::synth
