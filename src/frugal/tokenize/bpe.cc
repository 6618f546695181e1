// Byte-level BPE as llama.cpp does it: pre-tokenize into words, map each word's bytes to GPT-2's
// printable characters, then keep merging the adjacent pair with the lowest merge rank (leftmost
// first on ties). Symbols carry token ids so that rank lookups hash two integers, not strings.
#include <algorithm>

#include "frugal/tokenize/pretokenize.h"
#include "frugal/tokenize/unicode.h"
#include "frugal/tokenize/vocab.h"

namespace frugal {
namespace {

struct Symbol {
  uint32_t start;  // byte offset in the encoded word
  uint32_t len;    // bytes; 0 once merged into its left neighbour
  int32_t prev, next;
  TokenId id;      // token whose text is this symbol's text, -1 if none
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  uint32_t size;   // bytes of both symbols when queued; a mismatch later means the entry is stale
  TokenId result;  // token of the merged text, -1 if none
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class BpeSession {
 public:
  explicit BpeSession(const Vocab& vocab) : vocab_(vocab) {}

  void run(std::string_view text, std::vector<TokenId>& out) {
    decode(text);
    ends_.clear();
    pretokenize(vocab_.pre, cpts_, flags_, ends_);
    uint32_t begin = 0;
    for (uint32_t end : ends_) {
      word(text.substr(byte_offset_[begin], byte_offset_[end] - byte_offset_[begin]), out);
      begin = end;
    }
  }

 private:
  void decode(std::string_view text) {
    cpts_.clear();
    flags_.clear();
    byte_offset_.clear();
    for (const char* p = text.data(); p < text.data() + text.size();) {
      byte_offset_.push_back(static_cast<uint32_t>(p - text.data()));
      const uint32_t c = unicode::decode_utf8(p);
      cpts_.push_back(c);
      flags_.push_back(unicode::flags(c));
    }
    byte_offset_.push_back(static_cast<uint32_t>(text.size()));
  }

  void word(std::string_view bytes, std::vector<TokenId>& out) {
    encoded_.clear();
    symbols_.clear();
    for (size_t i = 0; i < bytes.size(); ++i) {
      const auto b = static_cast<uint8_t>(bytes[i]);
      const auto start = static_cast<uint32_t>(encoded_.size());
      unicode::append_utf8(encoded_, byte_to_unicode(b));
      const auto index = static_cast<int32_t>(i);
      symbols_.push_back({start, static_cast<uint32_t>(encoded_.size()) - start, index - 1,
                          i + 1 == bytes.size() ? -1 : index + 1, vocab_.byte_char_token[b]});
    }
    if (vocab_.ignore_merges) {
      const TokenId id = vocab_.find(encoded_);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    merge();
    for (int32_t i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

  void merge() {
    queue_.clear();
    for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      std::pop_heap(queue_.begin(), queue_.end(), BigramOrder{});
      const Bigram b = queue_.back();
      queue_.pop_back();
      Symbol& l = symbols_[b.left];
      Symbol& r = symbols_[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
      l.len += r.len;
      l.id = b.result;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
  }

  void try_add(int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    int32_t rank = -1;
    TokenId result = -1;
    if (l.id >= 0 && r.id >= 0) {
      if (const MergeTable::Merge* m = vocab_.merges.find(l.id, r.id)) rank = m->rank, result = m->result;
    } else if (!vocab_.text_merges.empty()) {
      key_.assign(encoded_, l.start, l.len);
      key_.push_back(' ');
      key_.append(encoded_, r.start, r.len);
      auto it = vocab_.text_merges.find(key_);
      if (it != vocab_.text_merges.end()) {
        rank = it->second;
        result = vocab_.find(std::string_view(encoded_).substr(l.start, l.len + r.len));
      }
    }
    if (rank < 0) return;
    queue_.push_back({rank, left, right, l.len + r.len, result});
    std::push_heap(queue_.begin(), queue_.end(), BigramOrder{});
  }

  void emit(const Symbol& s, std::vector<TokenId>& out) const {
    if (s.id >= 0) {
      out.push_back(s.id);
      return;
    }
    // llama.cpp looks each byte of the encoded text up as a one-byte token and drops the bytes
    // that are none.
    for (uint32_t k = 0; k < s.len; ++k) {
      const TokenId b = vocab_.raw_byte_token[static_cast<uint8_t>(encoded_[s.start + k])];
      if (b >= 0) out.push_back(b);
    }
  }

  const Vocab& vocab_;
  std::vector<uint32_t> cpts_;
  std::vector<uint8_t> flags_;
  std::vector<uint32_t> byte_offset_;  // byte offset of each code point, plus the end
  std::vector<uint32_t> ends_;
  std::string encoded_;
  std::string key_;
  std::vector<Symbol> symbols_;
  std::vector<Bigram> queue_;  // a heap under BigramOrder: best pair at the front
};

}  // namespace

void bpe_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  BpeSession(vocab).run(text, out);
}

}  // namespace frugal
