// Passkey retrieval (Landmark Attention style): one needle sentence holding a 5-digit key at a
// chosen depth in filler; the answer is the key alone.
#include "frugal/eval/tasks/families.h"
#include "frugal/eval/tasks/text_builder.h"

namespace frugal::eval {

namespace {

class PasskeyTask final : public TaskGenerator {
 public:
  std::string_view name() const override { return "passkey"; }
  std::string_view description() const override {
    return "a 5-digit pass key hidden once in filler text at a chosen depth";
  }
  bool supports_depth() const override { return true; }
  std::vector<TaskParam> params() const override { return {}; }

  Result<TaskDraft> generate(const TaskContext& ctx) const override {
    TaskRng rng(ctx.generator_seed, kContentStream);
    const std::string key = std::to_string(rng.range(10000, 99999));
    PromptParts parts;
    parts.header = "A pass key is hidden in the text. Find it.";
    parts.items = {"The pass key is " + key + ". Remember it. " + key + " is the pass key."};
    parts.question = "What is the pass key?";
    parts.answer = "A: " + key;
    TaskRng pos_rng(ctx.generator_seed, kPositionStream);
    const double depth = ctx.depth ? *ctx.depth : pos_rng.unit();
    return finish_draft(parts, ctx, name(), depth, key);
  }
};

}  // namespace

std::unique_ptr<TaskGenerator> make_passkey_task() { return std::make_unique<PasskeyTask>(); }

}  // namespace frugal::eval
