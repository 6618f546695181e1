// Variable tracking (RULER style): assignment chains "VAR B = A." ending in "VAR A = 52183.",
// spread through filler in dependency order, plus distractor chains. The question names the last
// variable of one chain; the answer writes every hop on its own line down to the number.
#include <algorithm>

#include "frugal/eval/tasks/families.h"
#include "frugal/eval/tasks/text_builder.h"

namespace frugal::eval {

namespace {

constexpr int64_t kMaxHops = 8;
constexpr int64_t kMaxChains = 8;
constexpr int64_t kMaxDistractorHops = 4;

struct Chain {
  std::vector<std::string> vars;  // vars[0] holds the number, vars[i] = vars[i - 1]
  std::string value;
};

std::string statement(const Chain& c, size_t i) {
  return "VAR " + c.vars[i] + " = " + (i == 0 ? c.value : c.vars[i - 1]) + ".";
}

class VarTrackTask final : public TaskGenerator {
 public:
  std::string_view name() const override { return "var_track"; }
  std::string_view description() const override {
    return "multi-hop variable assignment chains with distractor chains; answer each hop";
  }
  bool supports_depth() const override { return false; }
  std::vector<TaskParam> params() const override {
    return {{"hops", 1, kMaxHops, "assignments from the asked variable to its number (default 2-4)"},
            {"chains", 1, kMaxChains, "chains including the asked one (default: 2 up to what fits)"}};
  }

  Result<TaskDraft> generate(const TaskContext& ctx) const override {
    TaskRng rng(ctx.generator_seed, kContentStream);
    int64_t hops = param_or_draw(ctx, "hops", rng, 2, 4);
    const int64_t max_default_chains = std::clamp<int64_t>(ctx.length / 256, 1, kMaxChains - 1) + 1;
    int64_t chains = param_or_draw(ctx, "chains", rng, 2, max_default_chains);
    std::vector<int64_t> lengths(static_cast<size_t>(kMaxChains));
    for (size_t i = 1; i < lengths.size(); ++i) lengths[i] = rng.range(1, kMaxDistractorHops);
    // Defaults shrink (hops to fit at all, chains until a fifth is left for filler).
    lengths[0] = hops;
    while (!ctx.param("hops") && hops > 1 && overhead(lengths, 1) * 10 > ctx.length * 9) {
      lengths[0] = --hops;
    }
    if (!ctx.param("chains")) {
      while (chains > 1 && overhead(lengths, chains) * 5 > ctx.length * 4) --chains;
    }
    int64_t n_vars = 0;
    for (int64_t i = 0; i < chains; ++i) n_vars += lengths[static_cast<size_t>(i)];
    const auto names = distinct_names(rng, static_cast<size_t>(n_vars), 3, {"VAR"});
    std::vector<Chain> cs(static_cast<size_t>(chains));
    std::vector<std::string> values;
    size_t next_name = 0;
    for (size_t c = 0; c < cs.size(); ++c) {
      for (int64_t h = 0; h < lengths[c]; ++h) cs[c].vars.push_back(names[next_name++]);
      std::string v;
      do {
        v = std::to_string(rng.range(10000, 99999));
      } while (std::find(values.begin(), values.end(), v) != values.end());
      values.push_back(v);
      cs[c].value = v;
    }
    // Interleave the chains, each in dependency order.
    std::vector<size_t> slots;
    for (size_t c = 0; c < cs.size(); ++c) slots.insert(slots.end(), cs[c].vars.size(), c);
    rng.shuffle(slots);
    std::vector<size_t> emitted(cs.size(), 0);
    PromptParts parts;
    parts.header = "Track the values of the variables.";
    for (size_t c : slots) parts.items.push_back(statement(cs[c], emitted[c]++));
    const Chain& q = cs[0];
    parts.question = "What is the value of " + q.vars.back() + "?";
    for (size_t i = q.vars.size(); i-- > 0;) {
      parts.answer += q.vars[i] + " = " + (i == 0 ? q.value : q.vars[i - 1]) + "\n";
    }
    parts.answer += "A: " + q.value;
    return finish_draft(parts, ctx, name(), std::nullopt, q.value);
  }

 private:
  // Tokens without filler when the first `chains` chains of `lengths` are used.
  static int64_t overhead(const std::vector<int64_t>& lengths, int64_t chains) {
    int64_t body = -1;
    for (int64_t c = 0; c < chains; ++c) body += 15 * lengths[static_cast<size_t>(c)] + 2;
    return 1 + 34 + 1 + body + 1 + 25 + 1 + 10 * lengths[0] + 10;
  }
};

}  // namespace

std::unique_ptr<TaskGenerator> make_var_track_task() { return std::make_unique<VarTrackTask>(); }

}  // namespace frugal::eval
