// Synthetic tasks with exact answers, generated deterministically from a seed. One family per file
// under tasks/, one line per family in task_registry.cc.
//
// An example is a prompt (what the model reads after BOS) and an answer (the whole completion the
// model should write: its scratchpad lines, then the line "A: <final answer>"; generation should
// end there with EOS). Lengths count character-level tokens: 1 (BOS) + prompt + answer characters,
// and a generator fills its prompt with filler until that count is within a sentence of the target
// without passing it.
//
// Train and test never share an example. The generator's seed is the user's seed with bit 63
// cleared (train) or set (test); on top of that, an example's content (its items, question and
// answer, filler left out) must hash (FNV-1a 64) to an even value in train and an odd one in test.
// A generator redraws (attempt k mixes k into the seed) until the parity matches, so even short
// prompts with little filler and a small content space cannot repeat across the splits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/core/status.h"

namespace frugal::eval {

enum class TaskSplit : int { kTrain = 0, kTest = 1 };  // frozen
const char* split_name(TaskSplit split);
Result<TaskSplit> parse_split(std::string_view name);

inline constexpr int64_t kMinTaskLength = 192;  // every family's defaults fit from here
inline constexpr int64_t kMaxTaskLength = 1 << 16;
inline constexpr uint64_t kMaxUserSeed = (uint64_t{1} << 63) - 1;

struct TaskExample {
  std::string family;
  TaskSplit split = TaskSplit::kTrain;
  uint64_t seed = 0;         // the user's seed, below 2^63
  int64_t length = 0;        // the target, in tokens
  std::string prompt;        // ends with "\n"
  std::string answer;        // scratchpad lines, then "A: <final>"; no trailing newline
  std::string final_answer;  // the text after "A: "
  // 1 (BOS) + prompt + answer characters; never above `length`.
  int64_t n_tokens() const { return 1 + static_cast<int64_t>(prompt.size() + answer.size()); }
};

struct TaskOptions {
  int64_t length = 1024;  // target tokens, kMinTaskLength..kMaxTaskLength
  // Where a single-needle family puts its needle: 0 = start of the filler, 1 = end. Unset: drawn
  // from the seed. Families with many items reject it.
  std::optional<double> depth;
  // Family knobs by name ("pairs=16"); unset knobs are drawn from the seed within ranges that fit
  // the length. Unknown names, out-of-range values and impossible combinations are errors.
  std::vector<std::pair<std::string, int64_t>> params;
};

struct TaskParam {
  const char* name;
  int64_t min;
  int64_t max;
  const char* help;
};

// What a family's generate() receives: the resolved seed and the checked options.
struct TaskContext {
  uint64_t generator_seed = 0;  // family hash mixed with the split-tagged seed and the attempt
  int64_t length = 1024;
  std::optional<double> depth;
  std::vector<std::pair<std::string, int64_t>> params;
  std::optional<int64_t> param(std::string_view name) const;
};

// What a family produces for one draw.
struct TaskDraft {
  std::string prompt;
  std::string answer;
  std::string final_answer;
  std::string content;  // items, question and answer without filler: decides the split
};

class TaskGenerator {
 public:
  virtual ~TaskGenerator() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual bool supports_depth() const = 0;
  virtual std::vector<TaskParam> params() const = 0;
  // kInvalidArgument when the length cannot hold the requested content.
  virtual Result<TaskDraft> generate(const TaskContext& ctx) const = 0;
};

// The registry (task_registry.cc). Names are frozen: they appear in data files and results.
std::vector<std::string> task_family_names();
const TaskGenerator* find_task_family(std::string_view name);

// Checks the options, derives the seed and generates; verifies the result uses only the task
// alphabet and fits the length.
Result<TaskExample> generate_task(std::string_view family, TaskSplit split, uint64_t seed,
                                  const TaskOptions& opts = {});

}  // namespace frugal::eval
