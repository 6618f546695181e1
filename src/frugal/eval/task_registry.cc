#include <algorithm>
#include <cmath>

#include "frugal/eval/rng.h"
#include "frugal/eval/task.h"
#include "frugal/eval/tasks/families.h"
#include "frugal/eval/vocab.h"

namespace frugal::eval {

namespace {

struct Registry {
  std::vector<std::unique_ptr<TaskGenerator>> families;
  Registry() {
    // One line per family.
    families.push_back(make_passkey_task());
    families.push_back(make_kv_recall_task());
    families.push_back(make_var_track_task());
    families.push_back(make_arithmetic_task());
    families.push_back(make_word_count_task());
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

constexpr uint64_t kTestBit = uint64_t{1} << 63;
constexpr uint64_t kMaxAttempts = 64;  // a miss has probability 2^-64 when content varies

Status check_options(const TaskGenerator& gen, const TaskOptions& opts) {
  if (opts.length < kMinTaskLength || opts.length > kMaxTaskLength) {
    return error(ErrorCode::kInvalidArgument, "task {}: length {} is outside {}..{}", gen.name(),
                 opts.length, kMinTaskLength, kMaxTaskLength);
  }
  if (opts.depth) {
    if (!gen.supports_depth()) {
      return error(ErrorCode::kInvalidArgument, "task {}: has no depth option", gen.name());
    }
    if (!(*opts.depth >= 0.0 && *opts.depth <= 1.0)) {
      return error(ErrorCode::kInvalidArgument, "task {}: depth {} is outside 0..1", gen.name(),
                   *opts.depth);
    }
  }
  const auto known = gen.params();
  for (size_t i = 0; i < opts.params.size(); ++i) {
    const auto& [key, value] = opts.params[i];
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const TaskParam& p) { return key == p.name; });
    if (it == known.end()) {
      std::string names;
      for (const auto& p : known) names += std::string(names.empty() ? "" : ", ") + p.name;
      return error(ErrorCode::kInvalidArgument, "task {}: unknown parameter '{}' (known: {})",
                   gen.name(), key, names.empty() ? "none" : names);
    }
    if (value < it->min || value > it->max) {
      return error(ErrorCode::kInvalidArgument, "task {}: parameter {}={} is outside {}..{}",
                   gen.name(), key, value, it->min, it->max);
    }
    for (size_t j = 0; j < i; ++j) {
      if (opts.params[j].first == key) {
        return error(ErrorCode::kInvalidArgument, "task {}: parameter '{}' given twice",
                     gen.name(), key);
      }
    }
  }
  return ok_status();
}

}  // namespace

const char* split_name(TaskSplit split) { return split == TaskSplit::kTest ? "test" : "train"; }

Result<TaskSplit> parse_split(std::string_view name) {
  if (name == "train") return TaskSplit::kTrain;
  if (name == "test") return TaskSplit::kTest;
  return error(ErrorCode::kInvalidArgument, "split '{}' is not train or test", name);
}

std::optional<int64_t> TaskContext::param(std::string_view name) const {
  for (const auto& [k, v] : params) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::vector<std::string> task_family_names() {
  std::vector<std::string> names;
  for (const auto& f : registry().families) names.emplace_back(f->name());
  return names;
}

const TaskGenerator* find_task_family(std::string_view name) {
  for (const auto& f : registry().families) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

Result<TaskExample> generate_task(std::string_view family, TaskSplit split, uint64_t seed,
                                  const TaskOptions& opts) {
  const TaskGenerator* gen = find_task_family(family);
  if (gen == nullptr) {
    std::string names;
    for (const auto& n : task_family_names()) names += (names.empty() ? "" : ", ") + n;
    return error(ErrorCode::kNotFound, "task family '{}' does not exist (known: {})", family,
                 names);
  }
  if (seed > kMaxUserSeed) {
    return error(ErrorCode::kInvalidArgument, "task {}: seed {} is not below 2^63", family, seed);
  }
  FRUGAL_RETURN_IF_ERROR(check_options(*gen, opts));
  const uint64_t tagged = split == TaskSplit::kTest ? (seed | kTestBit) : seed;
  const uint64_t parity = split == TaskSplit::kTest ? 1 : 0;
  TaskContext ctx;
  ctx.length = opts.length;
  ctx.depth = opts.depth;
  ctx.params = opts.params;
  TaskExample ex;
  ex.family = std::string(gen->name());
  ex.split = split;
  ex.seed = seed;
  ex.length = opts.length;
  for (uint64_t attempt = 0;; ++attempt) {
    if (attempt == kMaxAttempts) {
      return error(ErrorCode::kInvalidArgument,
                   "task {}: no draw of seed {} fell into the {} split in {} attempts", family,
                   seed, split_name(split), kMaxAttempts);
    }
    uint64_t mixed = tagged + attempt * 0xD1B54A32D192ED03ULL;
    ctx.generator_seed = splitmix64_next(mixed) ^ fnv1a64(gen->name());
    FRUGAL_ASSIGN_OR_RETURN(TaskDraft draft, gen->generate(ctx));
    if ((fnv1a64(draft.content) & 1) != parity) continue;
    ex.prompt = std::move(draft.prompt);
    ex.answer = std::move(draft.answer);
    ex.final_answer = std::move(draft.final_answer);
    break;
  }
  FRUGAL_RETURN_IF_ERROR(check_task_alphabet(ex.prompt, fmt::format("task {} prompt", family)));
  FRUGAL_RETURN_IF_ERROR(check_task_alphabet(ex.answer, fmt::format("task {} answer", family)));
  if (ex.n_tokens() > ex.length) {
    return error(ErrorCode::kInvalidArgument, "task {}: example of {} tokens exceeds length {}",
                 family, ex.n_tokens(), ex.length);
  }
  return ex;
}

}  // namespace frugal::eval
