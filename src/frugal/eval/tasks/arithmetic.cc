// Multi-step addition and subtraction of 4-digit (zero-padded) numbers with a scratchpad. The
// problem sits at a chosen depth in filler; each answer line computes one step and restates the
// operations still to do, so after the first line the trace no longer needs the prompt (the
// property that protects reasoning traces under random KV eviction).
#include <algorithm>

#include "frugal/eval/tasks/families.h"
#include "frugal/eval/tasks/text_builder.h"

namespace frugal::eval {

namespace {

constexpr int64_t kMaxSteps = 8;
constexpr int64_t kMaxValue = 9999;  // every operand and running total stays in 0..9999
constexpr int kWidth = 4;

struct Step {
  char op;
  int64_t operand;
};

class ArithmeticTask final : public TaskGenerator {
 public:
  std::string_view name() const override { return "arithmetic"; }
  std::string_view description() const override {
    return "a chain of 4-digit additions and subtractions solved line by line";
  }
  bool supports_depth() const override { return true; }
  std::vector<TaskParam> params() const override {
    return {{"steps", 1, kMaxSteps, "operations in the problem (default 2-5, fewer if short)"}};
  }

  Result<TaskDraft> generate(const TaskContext& ctx) const override {
    TaskRng rng(ctx.generator_seed, kContentStream);
    int64_t steps = param_or_draw(ctx, "steps", rng, 2, 5);
    if (!ctx.param("steps")) {
      while (steps > 1 && overhead(steps) * 10 > ctx.length * 9) --steps;
    }
    int64_t total = draw_operand(rng, kMaxValue);
    const int64_t first = total;
    std::vector<Step> ops;
    std::vector<int64_t> totals;
    for (int64_t i = 0; i < kMaxSteps; ++i) {
      char op = rng.below(2) == 0 ? '+' : '-';
      if (op == '+' && total == kMaxValue) op = '-';
      if (op == '-' && total == 0) op = '+';
      const int64_t room = op == '+' ? kMaxValue - total : total;
      const int64_t v = draw_operand(rng, room);
      total += op == '+' ? v : -v;
      ops.push_back({op, v});
      totals.push_back(total);
    }
    ops.resize(static_cast<size_t>(steps));  // drawn for kMaxSteps so `steps` keeps the prefix

    PromptParts parts;
    parts.header = "Find the problem in the text and solve it.";
    std::string problem = "Problem: " + zero_pad(first, kWidth);
    for (const Step& s : ops) problem += rest_term(s);
    parts.items = {problem + "."};
    parts.question = "Solve the problem step by step.";
    int64_t acc = first;
    for (size_t i = 0; i < ops.size(); ++i) {
      const int64_t next = totals[i];
      parts.answer += zero_pad(acc, kWidth) + rest_term(ops[i]) + " = " + zero_pad(next, kWidth);
      if (i + 1 < ops.size()) {
        parts.answer += ", then";
        for (size_t j = i + 1; j < ops.size(); ++j) parts.answer += rest_term(ops[j]);
      }
      parts.answer += "\n";
      acc = next;
    }
    const std::string final_answer = zero_pad(acc, kWidth);
    parts.answer += "A: " + final_answer;
    TaskRng pos_rng(ctx.generator_seed, kPositionStream);
    const double depth = ctx.depth ? *ctx.depth : pos_rng.unit();
    return finish_draft(parts, ctx, name(), depth, final_answer);
  }

 private:
  static std::string rest_term(const Step& s) {
    return std::string(" ") + s.op + " " + zero_pad(s.operand, kWidth);
  }

  // A value of 1-4 digits (chosen uniformly), at most `room`.
  static int64_t draw_operand(TaskRng& rng, int64_t room) {
    const int64_t digits = rng.range(1, kWidth);
    int64_t lo = 1;
    for (int64_t d = 1; d < digits; ++d) lo *= 10;
    const int64_t hi = lo * 10 - 1;
    if (digits == 1) lo = 0;
    if (room < lo) return rng.range(0, room);
    return rng.range(lo, std::min(hi, room));
  }

  // Tokens without filler for a problem of `steps` operations (see the strings above).
  static int64_t overhead(int64_t steps) {
    const int64_t trace = 19 * steps + 6 * (steps - 1) + 7 * steps * (steps - 1) / 2 + 7;
    return 1 + 42 + 1 + (14 + 7 * steps) + 1 + 31 + 1 + trace;
  }
};

}  // namespace

std::unique_ptr<TaskGenerator> make_arithmetic_task() { return std::make_unique<ArithmeticTask>(); }

}  // namespace frugal::eval
