// Counting over the whole context: code words ("#7 ZORP.") occur 1-9 times each at random places in
// filler, next to distractor code words that are not asked for. Every sighting of a code word is
// numbered (#1, #2, ... in prompt order), so the model can walk them in its scratchpad one lookup
// per line: line k copies sighting #k and that word's running count (its previous line's count plus
// one). Then one summary line per asked word, in the question's order ("ZORP 3": the word, then its
// last running count), so that each line is again a single lookup; the final answer copies the
// summary counts. Every sighting matters, so the answer depends on content spread over the whole
// prompt.
#include <algorithm>

#include "frugal/eval/tasks/families.h"
#include "frugal/eval/tasks/text_builder.h"

namespace frugal::eval {

namespace {

constexpr int64_t kMaxWords = 4;
constexpr int64_t kMaxDistractors = 4;
constexpr int64_t kMaxCount = 9;
// Characters per sighting: the prompt item "#12 ZORP." plus its separator, and the scratchpad
// line "#12 ZORP 3\n".
constexpr int64_t kSightingChars = 21;
// Characters per asked word besides its sightings: its name in the question ("ZORP, "), its
// summary line ("ZORP 3\n") and its count in the final answer ("3 ").
constexpr int64_t kAskedWordChars = 6 + 7 + 2;

class WordCountTask final : public TaskGenerator {
 public:
  std::string_view name() const override { return "word_count"; }
  std::string_view description() const override {
    return "count how often each of 1-3 code words occurs among filler and distractor words, "
           "walking the numbered sightings in a scratchpad";
  }
  bool supports_depth() const override { return false; }
  std::vector<TaskParam> params() const override {
    return {{"words", 1, kMaxWords, "code words asked for (default 1-3)"},
            {"distractors", 0, kMaxDistractors, "code words present but not asked (default 0-2)"},
            {"max_count", 1, kMaxCount, "largest count (default: up to 9, less if short)"}};
  }

  Result<TaskDraft> generate(const TaskContext& ctx) const override {
    TaskRng rng(ctx.generator_seed, kContentStream);
    const int64_t words = param_or_draw(ctx, "words", rng, 1, 3);
    const int64_t distractors = param_or_draw(ctx, "distractors", rng, 0, 2);
    const int64_t n = words + distractors;
    // Sightings that fit while a fifth of the length stays filler.
    const int64_t room = (ctx.length * 4 / 5 - 49 - kAskedWordChars * words) / kSightingChars;
    const int64_t max_count = ctx.param("max_count")
                                  ? *ctx.param("max_count")
                                  : std::clamp<int64_t>(room / n, 1, kMaxCount);
    const auto names = distinct_names(rng, static_cast<size_t>(n), 4);
    std::vector<int64_t> counts(static_cast<size_t>(n));
    for (auto& c : counts) c = rng.range(1, max_count);
    std::vector<size_t> slots;
    for (size_t i = 0; i < counts.size(); ++i) {
      slots.insert(slots.end(), static_cast<size_t>(counts[i]), i);
    }
    rng.shuffle(slots);

    PromptParts parts;
    parts.header = "Count how often each code word appears.";
    std::vector<int64_t> running(static_cast<size_t>(n), 0);
    for (size_t k = 0; k < slots.size(); ++k) {
      const size_t i = slots[k];
      const std::string tag = "#" + std::to_string(k + 1) + " " + names[i];
      parts.items.push_back(tag + ".");
      parts.answer += tag + " " + std::to_string(++running[i]) + "\n";
    }
    parts.question = "Count ";
    std::string final_answer;
    for (int64_t w = 0; w < words; ++w) {  // names[0..words) are asked, in this order
      const size_t i = static_cast<size_t>(w);
      if (w > 0) {
        parts.question += ", ";
        final_answer += ' ';
      }
      parts.question += names[i];
      parts.answer += names[i] + " " + std::to_string(counts[i]) + "\n";
      final_answer += std::to_string(counts[i]);
    }
    parts.question += '.';
    parts.answer += "A: " + final_answer;
    auto draft = finish_draft(parts, ctx, name(), std::nullopt, final_answer);
    // The split is decided by the lowest bit of an FNV-1a hash of the content, which is the parity
    // of the number of odd bytes. In this format every name, sighting number and final count occurs
    // an even number of times, so when every count is 1 (short lengths) that parity is fixed and
    // one split could never be drawn. One more copy of the first asked name makes it depend on the
    // name's letters.
    if (draft.ok()) {  // appended piece by piece: GCC 12's -Wrestrict misfires on char + string
      draft->content += '\x1d';
      draft->content += names[0];
    }
    return draft;
  }
};

}  // namespace

std::unique_ptr<TaskGenerator> make_word_count_task() { return std::make_unique<WordCountTask>(); }

}  // namespace frugal::eval
