// Multi-key associative recall: many name -> code facts stated once among filler, several names
// queried. The answer restates each queried name before its code (one lookup per answer line).
#include <algorithm>

#include "frugal/eval/tasks/families.h"
#include "frugal/eval/tasks/text_builder.h"

namespace frugal::eval {

namespace {

constexpr int64_t kMaxPairs = 32;
constexpr int64_t kMaxQueries = 4;

std::string fact(const std::string& name, const std::string& code) {
  return "The code of " + name + " is " + code + ".";
}

class KvRecallTask final : public TaskGenerator {
 public:
  std::string_view name() const override { return "kv_recall"; }
  std::string_view description() const override {
    return "name -> 4-digit code facts scattered in filler; give the codes of 1-4 names";
  }
  bool supports_depth() const override { return false; }
  std::vector<TaskParam> params() const override {
    return {{"pairs", 1, kMaxPairs, "facts in the prompt (default: 2 up to what fits in 80%)"},
            {"queries", 1, kMaxQueries, "names asked for (default: 1 to min(4, pairs))"}};
  }

  Result<TaskDraft> generate(const TaskContext& ctx) const override {
    TaskRng rng(ctx.generator_seed, kContentStream);
    // Default: the most pairs that leave a fifth of the length to filler.
    int64_t cap = 2;
    for (int64_t p = 2; p <= kMaxPairs; ++p) {
      if (overhead(p, std::min(kMaxQueries, p)) * 5 <= ctx.length * 4) cap = p;
    }
    const int64_t pairs = param_or_draw(ctx, "pairs", rng, 2, cap);
    const int64_t queries = param_or_draw(ctx, "queries", rng, 1, std::min(kMaxQueries, pairs));
    if (queries > pairs) {
      return error(ErrorCode::kInvalidArgument, "task kv_recall: queries={} exceeds pairs={}",
                   queries, pairs);
    }
    const auto names = distinct_names(rng, static_cast<size_t>(pairs), 4);
    std::vector<std::string> codes(names.size());
    for (auto& c : codes) c = std::to_string(rng.range(1000, 9999));
    std::vector<size_t> order(names.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    rng.shuffle(order);  // order[0..queries) are asked, in this order

    PromptParts parts;
    parts.header = "Remember the code of each name.";
    for (size_t i = 0; i < names.size(); ++i) parts.items.push_back(fact(names[i], codes[i]));
    parts.question = "Give the codes of ";
    std::string final_answer;
    for (int64_t q = 0; q < queries; ++q) {
      const size_t i = order[static_cast<size_t>(q)];
      if (q > 0) {
        parts.question += ", ";
        final_answer += ' ';
      }
      parts.question += names[i];
      parts.answer += names[i] + " " + codes[i] + "\n";
      final_answer += codes[i];
    }
    parts.question += '.';
    parts.answer += "A: " + final_answer;
    return finish_draft(parts, ctx, name(), std::nullopt, final_answer);
  }

 private:
  // Tokens without filler for `pairs` facts and `queries` questions (see the strings above).
  static int64_t overhead(int64_t pairs, int64_t queries) {
    return 53 + 26 * pairs + 21 * queries;
  }
};

}  // namespace

std::unique_ptr<TaskGenerator> make_kv_recall_task() { return std::make_unique<KvRecallTask>(); }

}  // namespace frugal::eval
