#include "frugal/eval/tasks/text_builder.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace frugal::eval {

namespace {

constexpr std::array<const char*, 20> kSubjects = {
    "the cat",     "a small dog", "the old man",  "my sister",    "the farmer",
    "a tall tree", "the river",   "a young bird", "the teacher",  "our neighbor",
    "the baker",   "a quiet child", "the red fox", "the wind",    "a brown horse",
    "the sailor",  "the garden",  "a busy bee",   "the king",     "the moon"};
constexpr std::array<const char*, 20> kVerbs = {
    "sees",     "likes",    "walks past", "waits for", "looks at", "finds",   "carries",
    "follows",  "paints",   "remembers",  "hears",     "visits",   "watches", "cleans",
    "builds",   "reads about", "sings to", "forgets",  "holds",    "dreams of"};
constexpr std::array<const char*, 20> kObjects = {
    "the green hill", "a wooden box",  "the long road",   "an old song",  "the blue sea",
    "a warm bread",   "the last train", "a paper boat",   "the big city", "a silver coin",
    "the small house", "an empty cup", "the dark forest", "a yellow kite", "the stone bridge",
    "a soft blanket", "the morning sun", "a tiny shell",  "the open door", "a heavy bag"};
constexpr std::array<const char*, 10> kTails = {
    "in the morning", "at night",       "after the rain", "near the lake", "every day",
    "with great care", "for a while",   "before dinner",  "on a cold day", "without a word"};

int64_t body_length(const std::vector<std::string>& pieces) {
  if (pieces.empty()) return 0;
  int64_t n = static_cast<int64_t>(pieces.size()) - 1;
  for (const auto& p : pieces) n += static_cast<int64_t>(p.size());
  return n;
}

}  // namespace

int64_t fixed_tokens(const PromptParts& parts) {
  return 1 + static_cast<int64_t>(parts.header.size()) + 1 + body_length(parts.items) + 1 +
         static_cast<int64_t>(parts.question.size()) + 1 +
         static_cast<int64_t>(parts.answer.size());
}

std::string filler_sentence(TaskRng& rng) {
  std::string s = kSubjects[rng.below(kSubjects.size())];
  s += ' ';
  s += kVerbs[rng.below(kVerbs.size())];
  s += ' ';
  s += kObjects[rng.below(kObjects.size())];
  if (rng.below(2) == 1) {
    s += ' ';
    s += kTails[rng.below(kTails.size())];
  }
  s += '.';
  return s;
}

Result<std::string> assemble_prompt(const PromptParts& parts, const TaskContext& ctx,
                                    std::string_view family, std::optional<double> depth) {
  const int64_t fixed = fixed_tokens(parts);
  if (fixed > ctx.length) {
    return error(ErrorCode::kInvalidArgument,
                 "task {}: length {} is too short for these parameters (needs at least {} tokens "
                 "before filler)",
                 family, ctx.length, fixed);
  }
  // Filler sentences until the next one would pass the target.
  TaskRng filler_rng(ctx.generator_seed, kFillerStream);
  std::vector<std::string> filler;
  int64_t total = fixed;
  bool body_empty = parts.items.empty();
  for (;;) {
    std::string s = filler_sentence(filler_rng);
    const int64_t cost = static_cast<int64_t>(s.size()) + (body_empty ? 0 : 1);
    if (total + cost > ctx.length) break;
    total += cost;
    body_empty = false;
    filler.push_back(std::move(s));
  }
  // Gaps 0..m: gap g puts the item before filler sentence g (g = m: after the last).
  const size_t m = filler.size();
  std::vector<size_t> gaps(parts.items.size());
  TaskRng pos_rng(ctx.generator_seed, kPositionStream);
  if (depth) {
    for (auto& g : gaps) g = static_cast<size_t>(std::llround(*depth * static_cast<double>(m)));
  } else {
    for (auto& g : gaps) g = static_cast<size_t>(pos_rng.below(m + 1));
    std::sort(gaps.begin(), gaps.end());
  }
  std::vector<std::string> pieces;
  pieces.reserve(m + parts.items.size());
  size_t item = 0;
  for (size_t g = 0; g <= m; ++g) {
    while (item < gaps.size() && gaps[item] == g) pieces.push_back(parts.items[item++]);
    if (g < m) pieces.push_back(std::move(filler[g]));
  }
  std::string prompt = parts.header;
  prompt += '\n';
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) prompt += ' ';
    prompt += pieces[i];
  }
  prompt += '\n';
  prompt += parts.question;
  prompt += '\n';
  return prompt;
}

Result<TaskDraft> finish_draft(const PromptParts& parts, const TaskContext& ctx,
                               std::string_view family, std::optional<double> depth,
                               std::string final_answer) {
  TaskDraft d;
  FRUGAL_ASSIGN_OR_RETURN(d.prompt, assemble_prompt(parts, ctx, family, depth));
  d.answer = parts.answer;
  d.final_answer = std::move(final_answer);
  // Separators outside the task alphabet keep the key unambiguous.
  for (const auto& item : parts.items) d.content += item + '\x1f';
  d.content += '\x1e' + parts.header + '\x1e' + parts.question + '\x1e' + parts.answer;
  return d;
}

std::vector<std::string> distinct_names(TaskRng& rng, size_t count, int len,
                                        const std::vector<std::string>& avoid) {
  std::vector<std::string> names;
  names.reserve(count);
  while (names.size() < count) {
    std::string n(static_cast<size_t>(len), 'A');
    for (char& c : n) c = static_cast<char>('A' + rng.below(26));
    if (std::find(names.begin(), names.end(), n) != names.end()) continue;
    if (std::find(avoid.begin(), avoid.end(), n) != avoid.end()) continue;
    names.push_back(std::move(n));
  }
  return names;
}

std::string zero_pad(int64_t value, int width) {
  std::string digits = std::to_string(value);
  if (static_cast<int>(digits.size()) < width) {
    digits.insert(0, static_cast<size_t>(width) - digits.size(), '0');
  }
  return digits;
}

int64_t param_or_draw(const TaskContext& ctx, const char* name, TaskRng& rng, int64_t lo,
                      int64_t hi) {
  // Draw even when the knob is set, so the rest of the content stream is the same either way.
  const int64_t drawn = rng.range(lo, std::max(lo, hi));
  if (auto v = ctx.param(name)) return *v;
  return drawn;
}

}  // namespace frugal::eval
