#include "frugal/tokenize/pretokenize.h"

#include "frugal/tokenize/unicode.h"

namespace frugal {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kPunctuation;
using unicode::kWhitespace;

// One contiguous piece of the text being split: code points [begin, end).
struct Span {
  uint32_t begin, end;
};

class Matcher {
 public:
  Matcher(std::span<const uint32_t> cpts, std::span<const uint8_t> flags, Span span)
      : cpts_(cpts), flags_(flags), end_(span.end) {}

  // Flags of the code point at `pos`, 0 outside the span (so no class test succeeds there).
  uint8_t fl(uint32_t pos) const { return pos < end_ ? flags_[pos] : 0; }
  uint32_t cp(uint32_t pos) const { return pos < end_ ? cpts_[pos] : 0xFFFFFFFFu; }
  bool letter(uint32_t pos) const { return fl(pos) & kLetter; }
  bool number(uint32_t pos) const { return fl(pos) & kNumber; }
  bool space(uint32_t pos) const { return fl(pos) & kWhitespace; }
  // [^\s\p{L}\p{N}]: any code point that is neither white space, letter nor number.
  bool other(uint32_t pos) const { return pos < end_ && !(flags_[pos] & (kWhitespace | kLetter | kNumber)); }
  uint32_t end() const { return end_; }

  // Length of the contraction at `pos` ('s 't 'm 'd 're 've 'll), 0 if none.
  uint32_t contraction(uint32_t pos, bool any_case) const {
    if (cp(pos) != '\'' || pos + 1 >= end_) return 0;
    auto lower = [&](uint32_t c) { return any_case && c >= 'A' && c <= 'Z' ? c + 32 : c; };
    const uint32_t c1 = lower(cp(pos + 1));
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= end_) return 0;
    const uint32_t c2 = lower(cp(pos + 2));
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }

  // \s+(?!\S) then \s+ : a run of n > 1 white spaces followed by something else leaves its last
  // white space to start the next word.
  uint32_t whitespace_run(uint32_t pos) const {
    uint32_t n = 0;
    while (space(pos + n)) ++n;
    if (n > 1 && pos + n < end_) return n - 1;
    return n;
  }

 private:
  std::span<const uint32_t> cpts_;
  std::span<const uint8_t> flags_;
  uint32_t end_;
};

// Length of the gpt2 word starting at `pos`.
uint32_t gpt2_word(const Matcher& m, uint32_t pos) {
  if (uint32_t n = m.contraction(pos, /*any_case=*/false)) return n;
  // " ?X+" for X in letters, numbers, others: an optional single ASCII space, then a run.
  const uint32_t q = m.cp(pos) == ' ' ? pos + 1 : pos;
  uint32_t e = q;
  if (m.letter(q)) {
    while (m.letter(e)) ++e;
  } else if (m.number(q)) {
    while (m.number(e)) ++e;
  } else if (m.other(q)) {
    while (m.other(e)) ++e;
  }
  if (e > q) return e - pos;
  // White space; an isolated white space before a non-space is left unmatched by the regex,
  // which makes it a word of its own all the same.
  if (uint32_t n = m.whitespace_run(pos)) return n;
  return 1;
}

// Length of the llama3 / qwen2 word starting at `pos`.
uint32_t llama3_word(const Matcher& m, uint32_t pos, uint32_t max_digits) {
  if (uint32_t n = m.contraction(pos, /*any_case=*/true)) return n;
  const uint32_t c = m.cp(pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c != '\r' && c != '\n' && !m.number(pos) && (m.letter(pos) || m.letter(pos + 1))) {
    uint32_t e = pos + 1;
    while (m.letter(e)) ++e;
    return e - pos;
  }
  // \p{N}{1,max}
  if (m.number(pos)) {
    uint32_t e = pos;
    while (e - pos < max_digits && m.number(e)) ++e;
    return e - pos;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  const uint32_t q = c == ' ' ? pos + 1 : pos;
  if (m.other(q)) {
    uint32_t e = q;
    while (m.other(e)) ++e;
    while (m.cp(e) == '\r' || m.cp(e) == '\n') ++e;
    return e - pos;
  }
  // \s*[\r\n]+ : the white-space run up to and including its last \r or \n.
  uint32_t n = 0, through_newline = 0;
  while (m.space(pos + n)) {
    const uint32_t w = m.cp(pos + n);
    ++n;
    if (w == '\r' || w == '\n') through_newline = n;
  }
  if (through_newline > 0) return through_newline;
  // \s+(?!\S) | \s+
  if (n > 0) return m.whitespace_run(pos);
  return 1;
}

template <typename WordFn>
void split_words(std::span<const uint32_t> cpts, std::span<const uint8_t> flags, Span span,
                 WordFn word, std::vector<uint32_t>& ends) {
  const Matcher m(cpts, flags, span);
  for (uint32_t pos = span.begin; pos < span.end;) {
    pos += word(m, pos);
    ends.push_back(pos);
  }
}

// Regex `X+` as a splitter: runs of X are pieces, and so are the gaps between them.
template <typename Pred>
void split_runs(Span span, Pred is_x, std::vector<uint32_t>& ends) {
  uint32_t pos = span.begin;
  while (pos < span.end) {
    const bool x = is_x(pos);
    while (pos < span.end && is_x(pos) == x) ++pos;
    ends.push_back(pos);
  }
}

// Regex [0-9][0-9][0-9] as a splitter: leftmost non-overlapping triples of ASCII digits.
void split_digit_triples(std::span<const uint32_t> cpts, Span span, std::vector<uint32_t>& ends) {
  auto digit = [&](uint32_t pos) { return cpts[pos] >= '0' && cpts[pos] <= '9'; };
  uint32_t gap_start = span.begin;
  for (uint32_t pos = span.begin; pos < span.end;) {
    if (pos + 3 <= span.end && digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      if (pos > gap_start) ends.push_back(pos);
      pos += 3;
      ends.push_back(pos);
      gap_start = pos;
    } else {
      ++pos;
    }
  }
  if (gap_start < span.end) ends.push_back(span.end);
}

// Applies `split` to every piece listed in `ends` (pieces start where the previous one ended).
template <typename SplitFn>
std::vector<uint32_t> resplit(uint32_t begin, const std::vector<uint32_t>& ends, SplitFn split) {
  std::vector<uint32_t> out;
  out.reserve(ends.size() * 2);
  uint32_t b = begin;
  for (uint32_t e : ends) {
    split(Span{b, e}, out);
    b = e;
  }
  return out;
}

void pretokenize_default(std::span<const uint32_t> cpts, std::span<const uint8_t> flags,
                         std::vector<uint32_t>& ends) {
  const Span all{0, static_cast<uint32_t>(cpts.size())};
  auto punct = [&](uint32_t pos) {
    const uint32_t c = cpts[pos];
    return (flags[pos] & kPunctuation) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|';
  };
  std::vector<uint32_t> pieces;
  split_runs(all, punct, pieces);
  pieces = resplit(0, pieces, [&](Span s, std::vector<uint32_t>& out) {
    split_words(cpts, flags, s, gpt2_word, out);
  });
  pieces = resplit(0, pieces, [&](Span s, std::vector<uint32_t>& out) {
    split_runs(s, [&](uint32_t pos) { return (flags[pos] & kNumber) != 0; }, out);
  });
  pieces = resplit(0, pieces, [&](Span s, std::vector<uint32_t>& out) { split_digit_triples(cpts, s, out); });
  ends.insert(ends.end(), pieces.begin(), pieces.end());
}

}  // namespace

void pretokenize(PreTokenizerKind kind, std::span<const uint32_t> cpts, std::span<const uint8_t> flags,
                 std::vector<uint32_t>& ends) {
  const Span all{0, static_cast<uint32_t>(cpts.size())};
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      split_words(cpts, flags, all, gpt2_word, ends);
      return;
    case PreTokenizerKind::kLlama3:
      split_words(cpts, flags, all, [](const Matcher& m, uint32_t pos) { return llama3_word(m, pos, 3); }, ends);
      return;
    case PreTokenizerKind::kQwen2:
      split_words(cpts, flags, all, [](const Matcher& m, uint32_t pos) { return llama3_word(m, pos, 1); }, ends);
      return;
    case PreTokenizerKind::kDefault:
      pretokenize_default(cpts, flags, ends);
      return;
  }
}

}  // namespace frugal
