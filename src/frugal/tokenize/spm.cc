// SentencePiece-style tokenization as llama.cpp does it: start from UTF-8 characters, keep
// merging the adjacent pair whose concatenation is the highest-scoring token (leftmost first on
// ties), and spell out characters that are no token as <0xXX> byte tokens.
#include <algorithm>

#include "frugal/tokenize/unicode.h"
#include "frugal/tokenize/vocab.h"

namespace frugal {
namespace {

struct Symbol {
  uint32_t start;  // byte offset in the text
  uint32_t len;    // bytes; 0 once merged into its left neighbour
  int32_t prev, next;
};

struct Bigram {
  int32_t left, right;
  float score;
  uint32_t size;  // bytes of both symbols when queued; a mismatch later means the entry is stale
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<TokenId>& out) {
    for (uint32_t off = 0; off < text_.size();) {
      const uint32_t len = static_cast<uint32_t>(
          std::min<size_t>(unicode::utf8_len(static_cast<uint8_t>(text_[off])), text_.size() - off));
      const int32_t index = static_cast<int32_t>(symbols_.size());
      off += len;
      symbols_.push_back({off - len, len, index - 1, off == text_.size() ? -1 : index + 1});
    }
    for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) try_add(i - 1, i);

    while (!queue_.empty()) {
      std::pop_heap(queue_.begin(), queue_.end(), BigramOrder{});
      const Bigram b = queue_.back();
      queue_.pop_back();
      Symbol& l = symbols_[b.left];
      Symbol& r = symbols_[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    for (int32_t i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

 private:
  std::string_view view(const Symbol& s, uint32_t len) const { return text_.substr(s.start, len); }

  void try_add(int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = symbols_[left].len + symbols_[right].len;
    const TokenId id = vocab_.find(view(symbols_[left], size));
    if (id < 0) return;
    queue_.push_back({left, right, vocab_.score[id], size});
    std::push_heap(queue_.begin(), queue_.end(), BigramOrder{});
  }

  void emit(const Symbol& s, std::vector<TokenId>& out) const {
    const TokenId id = vocab_.find(view(s, s.len));
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    // Merged symbols are always tokens, so this is a single character missing from the
    // vocabulary: spell it out byte by byte.
    for (uint32_t k = 0; k < s.len; ++k) {
      const TokenId b = vocab_.spm_byte_token[static_cast<uint8_t>(text_[s.start + k])];
      if (b >= 0) {
        out.push_back(b);
      } else if (vocab_.unk >= 0) {
        out.push_back(vocab_.unk);
      }
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::vector<Bigram> queue_;  // a heap under BigramOrder: best pair at the front
};

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<TokenId>& out) {
  SpmSession(vocab, text).run(out);
}

}  // namespace frugal
