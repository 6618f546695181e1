// Shared by the families: filler sentences and the layout of a prompt around its items.
//
// Prompt layout: header "\n" body "\n" question "\n", where the body is filler sentences and the
// family's items (needles, facts, statements) joined by single spaces. The filler contains only
// lower-case letters, spaces and periods, so digits and capitals in a prompt always belong to items.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/eval/rng.h"
#include "frugal/eval/task.h"

namespace frugal::eval {

// Streams of one example's generator seed: content, filler and positions are drawn apart, so the
// same seed at another length keeps its content and extends (or cuts) the same filler.
enum TaskStream : uint64_t { kContentStream = 1, kFillerStream = 2, kPositionStream = 3 };

struct PromptParts {
  std::string header;              // first line, no newline
  std::vector<std::string> items;  // placed in this order among the filler sentences
  std::string question;            // last prompt line, no newline
  std::string answer;              // the full expected completion
};

// Tokens the example needs with no filler at all: 1 (BOS) + prompt + answer.
int64_t fixed_tokens(const PromptParts& parts);

// One filler sentence ("the red fox watches a paper boat near the lake.").
std::string filler_sentence(TaskRng& rng);

// The draft of an example: the prompt (assemble_prompt), the answer and the content key.
Result<TaskDraft> finish_draft(const PromptParts& parts, const TaskContext& ctx,
                               std::string_view family, std::optional<double> depth,
                               std::string final_answer);

// Builds the prompt, filling the body up to ctx.length. With `depth` (single-item families only)
// the item goes at gap round(depth * m) of the m filler sentences; otherwise each item's gap is
// uniform in [0, m], sorted so items keep their order. kInvalidArgument, naming the family and the
// shortfall, when even an empty filler does not fit.
Result<std::string> assemble_prompt(const PromptParts& parts, const TaskContext& ctx,
                                    std::string_view family, std::optional<double> depth);

// A run of distinct upper-case names of `len` letters, none equal to anything in `avoid`.
std::vector<std::string> distinct_names(TaskRng& rng, size_t count, int len,
                                        const std::vector<std::string>& avoid = {});

// `value` in decimal, left-padded with zeros to `width` digits.
std::string zero_pad(int64_t value, int width);

// Resolves a knob: the explicit value if set (its range was checked already), else a draw in
// [lo, hi] from `rng`. The draw is made either way, so setting a knob leaves the later draws alone.
int64_t param_or_draw(const TaskContext& ctx, const char* name, TaskRng& rng, int64_t lo,
                      int64_t hi);

}  // namespace frugal::eval
