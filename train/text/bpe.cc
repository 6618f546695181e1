// Byte-level BPE for the natural-text model: learns a vocabulary from a corpus and encodes the
// corpus into token ids for training.
//
//   bpe learn  --corpus train.txt --vocab-size 8192 --out vocab.json
//   bpe encode --vocab vocab.json --corpus train.txt --out train.bin
//
// The corpus is documents separated by NUL bytes (train/text/build_corpus.py). Words come from
// frugal's own llama3 pre-tokenizer (src/frugal/tokenize/pretokenize.cc, the split llama.cpp
// applies for `tokenizer.ggml.pre = llama-bpe`), so the model is trained on exactly the pieces
// frugal and llama.cpp will feed it. Bytes are written as GPT-2's printable characters, as every
// byte-level BPE vocabulary in GGUF is.
//
// Learning: the classic algorithm over the distinct words with their counts. Each step merges the
// most frequent adjacent pair (ties: the smaller pair of token ids, so a run is reproducible);
// pair counts are kept up to date incrementally, touching only the words that contain the merged
// pair. The first 256 tokens are the bytes, then one token per merge, then the two control tokens.
//
// Encoding applies the merges by rank, lowest first, leftmost on ties, and, as llama.cpp does for
// llama-bpe vocabularies (ignore_merges), takes a whole word that is itself a token as that token.
// Output: little-endian uint16 ids, each document as BOS, its tokens, EOS.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "frugal/tokenize/pretokenize.h"
#include "frugal/tokenize/unicode.h"

namespace {

using frugal::PreTokenizerKind;

// GPT-2's map from bytes to printable code points.
std::vector<uint32_t> byte_chars() {
  std::vector<uint32_t> out(256, 0);
  std::vector<bool> direct(256, false);
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) out[b] = direct[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string_view> documents(const std::string& corpus) {
  std::vector<std::string_view> docs;
  size_t begin = 0;
  while (begin < corpus.size()) {
    size_t end = corpus.find('\0', begin);
    if (end == std::string::npos) end = corpus.size();
    if (end > begin) docs.emplace_back(corpus.data() + begin, end - begin);
    begin = end + 1;
  }
  return docs;
}

// Calls fn(word bytes) for every pre-tokenized word of `text`.
template <class Fn>
void for_each_word(std::string_view text, Fn&& fn) {
  std::vector<uint32_t> cpts, ends, offsets;
  std::vector<uint8_t> flags;
  for (const char* p = text.data(); p < text.data() + text.size();) {
    offsets.push_back(static_cast<uint32_t>(p - text.data()));
    const uint32_t c = frugal::unicode::decode_utf8(p);
    cpts.push_back(c);
    flags.push_back(frugal::unicode::flags(c));
  }
  offsets.push_back(static_cast<uint32_t>(text.size()));
  frugal::pretokenize(PreTokenizerKind::kLlama3, cpts, flags, ends);
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    fn(text.substr(offsets[begin], offsets[end] - offsets[begin]));
    begin = end;
  }
}

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
};
uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else o += static_cast<char>(c);
  }
  return o;
}

int learn(const std::string& corpus_path, int vocab_size, const std::string& out_path) {
  const std::string corpus = read_file(corpus_path);
  std::unordered_map<std::string, int64_t> counts;
  for (std::string_view doc : documents(corpus))
    for_each_word(doc, [&](std::string_view w) { ++counts[std::string(w)]; });
  std::cerr << "distinct words: " << counts.size() << "\n";

  // Tokens: 0..255 bytes, then merges. texts[i] = the raw bytes of token i.
  std::vector<std::string> texts;
  for (int b = 0; b < 256; ++b) texts.emplace_back(1, static_cast<char>(b));
  std::vector<std::pair<int32_t, int32_t>> merges;

  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  words.reserve(counts.size());
  for (auto& [w, c] : counts) {
    std::vector<int32_t> s(w.size());
    for (size_t i = 0; i < w.size(); ++i) s[i] = static_cast<uint8_t>(w[i]);
    words.push_back(std::move(s));
    freq.push_back(c);
  }
  counts.clear();

  std::unordered_map<uint64_t, int64_t, PairHash> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>, PairHash> pair_words;  // may hold stale entries
  for (int32_t wi = 0; wi < static_cast<int32_t>(words.size()); ++wi) {
    const auto& s = words[wi];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = key(s[i], s[i + 1]);
      pair_count[k] += freq[wi];
      auto& v = pair_words[k];
      if (v.empty() || v.back() != wi) v.push_back(wi);
    }
  }
  // Max-heap of (count, -a, -b): highest count first, then the smallest pair of ids.
  using Entry = std::tuple<int64_t, int64_t, int64_t>;
  std::priority_queue<Entry> heap;
  for (auto& [k, c] : pair_count) heap.emplace(c, -static_cast<int64_t>(k >> 32), -static_cast<int64_t>(k & 0xffffffff));

  const int n_merges = vocab_size - 256 - 2;
  std::unordered_map<uint64_t, int64_t, PairHash> delta;
  while (static_cast<int>(merges.size()) < n_merges && !heap.empty()) {
    auto [c, na, nb] = heap.top();
    heap.pop();
    const int32_t a = static_cast<int32_t>(-na), b = static_cast<int32_t>(-nb);
    const uint64_t k = key(a, b);
    auto it = pair_count.find(k);
    if (it == pair_count.end() || it->second != c) continue;  // stale
    if (c < 2) break;
    const auto id = static_cast<int32_t>(texts.size());
    texts.push_back(texts[a] + texts[b]);
    merges.emplace_back(a, b);
    delta.clear();
    std::vector<int32_t> touched = std::move(pair_words[k]);
    pair_words.erase(k);
    for (int32_t wi : touched) {
      auto& s = words[wi];
      bool has = false;
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if (s[i] == a && s[i + 1] == b) { has = true; break; }
      if (!has) continue;
      const int64_t f = freq[wi];
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[key(s[i], s[i + 1])] -= f;
      std::vector<int32_t> t;
      t.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) t.push_back(id), i += 2;
        else t.push_back(s[i]), ++i;
      }
      s = std::move(t);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t nk = key(s[i], s[i + 1]);
        delta[nk] += f;
        if (s[i] == id || s[i + 1] == id) {
          auto& v = pair_words[nk];
          if (v.empty() || v.back() != wi) v.push_back(wi);
        }
      }
    }
    for (auto& [dk, d] : delta) {
      if (d == 0) continue;
      int64_t& pc = pair_count[dk];
      pc += d;
      if (pc <= 0) pair_count.erase(dk);
      else heap.emplace(pc, -static_cast<int64_t>(dk >> 32), -static_cast<int64_t>(dk & 0xffffffff));
    }
    if (merges.size() % 1000 == 0) std::cerr << "merges: " << merges.size() << " (count " << c << ")\n";
  }

  const auto bc = byte_chars();
  auto printable = [&](const std::string& raw) {
    std::string o;
    for (unsigned char ch : raw) frugal::unicode::append_utf8(o, bc[ch]);
    return o;
  };
  std::ofstream out(out_path);
  out << "{\n\"pre\": \"llama-bpe\",\n\"tokens\": [";
  for (size_t i = 0; i < texts.size(); ++i) out << (i ? ",\n" : "\n") << '"' << json_escape(printable(texts[i])) << '"';
  out << ",\n\"<|begin_of_text|>\",\n\"<|end_of_text|>\"\n],\n";
  out << "\"bos\": " << texts.size() << ",\n\"eos\": " << texts.size() + 1 << ",\n\"merges\": [";
  for (size_t i = 0; i < merges.size(); ++i)
    out << (i ? ",\n" : "\n") << '"' << json_escape(printable(texts[merges[i].first])) << ' '
        << json_escape(printable(texts[merges[i].second])) << '"';
  out << "\n]\n}\n";
  std::cerr << "vocabulary: " << texts.size() + 2 << " tokens, " << merges.size() << " merges -> " << out_path << "\n";
  return 0;
}

// Minimal reader for the vocab.json written above: the "tokens" and "merges" string arrays.
std::vector<std::string> json_strings(const std::string& js, const std::string& field) {
  std::vector<std::string> out;
  size_t p = js.find("\"" + field + "\"");
  if (p == std::string::npos) throw std::runtime_error("vocab file lacks " + field);
  p = js.find('[', p);
  const size_t end = js.find("\n]", p);
  while (true) {
    p = js.find('"', p);
    if (p == std::string::npos || p > end) break;
    std::string s;
    for (++p; js[p] != '"'; ++p) {
      if (js[p] == '\\') {
        ++p;
        if (js[p] == 'u') {
          s += static_cast<char>(std::stoi(js.substr(p + 1, 4), nullptr, 16));
          p += 4;
        } else s += js[p];
      } else s += js[p];
    }
    ++p;
    out.push_back(std::move(s));
  }
  return out;
}

int encode(const std::string& vocab_path, const std::string& corpus_path, const std::string& out_path) {
  const std::string js = read_file(vocab_path);
  const auto tokens = json_strings(js, "tokens");
  const auto merge_texts = json_strings(js, "merges");
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t i = 0; i < tokens.size(); ++i) id_of.emplace(tokens[i], static_cast<int32_t>(i));
  const auto bos = static_cast<uint16_t>(id_of.at("<|begin_of_text|>"));
  const auto eos = static_cast<uint16_t>(id_of.at("<|end_of_text|>"));
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, PairHash> rank;  // pair -> (rank, result)
  for (size_t r = 0; r < merge_texts.size(); ++r) {
    const std::string& m = merge_texts[r];
    const size_t sp = m.find(' ', 1);
    const int32_t a = id_of.at(m.substr(0, sp)), b = id_of.at(m.substr(sp + 1));
    rank.emplace(key(a, b), std::make_pair(static_cast<int32_t>(r), id_of.at(m.substr(0, sp) + m.substr(sp + 1))));
  }
  const auto bc = byte_chars();
  std::vector<int32_t> byte_token(256);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    frugal::unicode::append_utf8(s, bc[b]);
    byte_token[b] = id_of.at(s);
  }
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  auto encode_word = [&](std::string_view w) -> const std::vector<int32_t>& {
    auto it = cache.find(std::string(w));
    if (it != cache.end()) return it->second;
    std::string printable;
    for (unsigned char ch : w) frugal::unicode::append_utf8(printable, bc[ch]);
    std::vector<int32_t> s;
    if (auto whole = id_of.find(printable); whole != id_of.end()) {
      s.push_back(whole->second);
    } else {
      for (unsigned char ch : w) s.push_back(byte_token[ch]);
      while (s.size() > 1) {
        int32_t best = -1, best_rank = INT32_MAX, result = -1;
        for (size_t i = 0; i + 1 < s.size(); ++i) {
          auto r = rank.find(key(s[i], s[i + 1]));
          if (r != rank.end() && r->second.first < best_rank)
            best_rank = r->second.first, best = static_cast<int32_t>(i), result = r->second.second;
        }
        if (best < 0) break;
        s[best] = result;
        s.erase(s.begin() + best + 1);
      }
    }
    return cache.emplace(std::string(w), std::move(s)).first->second;
  };
  const std::string corpus = read_file(corpus_path);
  std::vector<uint16_t> ids;
  size_t n_docs = 0;
  for (std::string_view doc : documents(corpus)) {
    ids.push_back(bos);
    for_each_word(doc, [&](std::string_view w) {
      for (int32_t t : encode_word(w)) ids.push_back(static_cast<uint16_t>(t));
    });
    ids.push_back(eos);
    ++n_docs;
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
  if (!out) throw std::runtime_error("cannot write " + out_path);
  std::cerr << n_docs << " documents, " << corpus.size() << " bytes -> " << ids.size() << " tokens ("
            << static_cast<double>(corpus.size()) / static_cast<double>(ids.size()) << " bytes/token) -> "
            << out_path << "\n";
  return 0;
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& def = "") {
  for (int i = 2; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  if (def.empty()) throw std::runtime_error("missing " + name);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "learn") return learn(flag(argc, argv, "--corpus"), std::stoi(flag(argc, argv, "--vocab-size", "8192")),
                                     flag(argc, argv, "--out"));
    if (cmd == "encode") return encode(flag(argc, argv, "--vocab"), flag(argc, argv, "--corpus"), flag(argc, argv, "--out"));
    std::cerr << "usage: bpe learn --corpus FILE --vocab-size N --out vocab.json\n"
                 "       bpe encode --vocab vocab.json --corpus FILE --out ids.bin\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bpe: " << e.what() << "\n";
    return 1;
  }
}
