// Task generators: determinism, length control, alphabet, train/test disjointness, options, and
// each family's answer re-derived from its prompt by an independent reading of the text.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "frugal/eval/score.h"
#include "frugal/eval/task.h"
#include "frugal/eval/vocab.h"

namespace frugal::eval {
namespace {

TaskExample gen(const std::string& family, uint64_t seed, int64_t length,
                TaskSplit split = TaskSplit::kTrain, TaskOptions opts = {}) {
  opts.length = length;
  auto r = generate_task(family, split, seed, opts);
  EXPECT_TRUE(r.ok()) << family << " seed " << seed << " length " << length << ": "
                      << r.status().to_string();
  return r.ok() ? *r : TaskExample{};
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

// The body: the prompt's second line (header, body, question).
std::string body_of(const TaskExample& ex) {
  auto ls = lines_of(ex.prompt);
  EXPECT_EQ(ls.size(), 3u) << ex.prompt;
  return ls.size() == 3 ? ls[1] : "";
}

// Sentences of the body, split at ". " boundaries.
std::vector<std::string> sentences(const std::string& body) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p < body.size()) {
    size_t e = body.find(". ", p);
    if (e == std::string::npos) e = body.size() - 1;
    out.push_back(body.substr(p, e + 1 - p));
    p = e + 2;
  }
  return out;
}

const std::vector<int64_t> kLengths = {192, 256, 512, 1024, 2048, 4096};

TEST(Tasks, RegistryListsFiveFamilies) {
  const auto names = task_family_names();
  EXPECT_EQ(names, (std::vector<std::string>{"passkey", "kv_recall", "var_track", "arithmetic",
                                             "word_count"}));
  EXPECT_EQ(find_task_family("nope"), nullptr);
  auto r = generate_task("nope", TaskSplit::kTrain, 0);
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
}

TEST(Tasks, EveryFamilyFitsItsLengthAndScoresItsOwnAnswer) {
  for (const auto& family : task_family_names()) {
    for (int64_t length : kLengths) {
      for (uint64_t seed = 0; seed < 40; ++seed) {
        const TaskExample ex = gen(family, seed, length);
        ASSERT_FALSE(ex.prompt.empty());
        EXPECT_LE(ex.n_tokens(), length);
        // Filler stops within one sentence (at most 61 characters) of the target.
        EXPECT_GE(ex.n_tokens(), length - 62) << family << " " << length << " " << seed;
        EXPECT_TRUE(check_task_alphabet(ex.prompt, "prompt").ok());
        EXPECT_TRUE(check_task_alphabet(ex.answer, "answer").ok());
        EXPECT_EQ(ex.prompt.back(), '\n');
        EXPECT_EQ(lines_of(ex.prompt).size(), 3u);
        const std::string tail = "A: " + ex.final_answer;
        ASSERT_GE(ex.answer.size(), tail.size());
        EXPECT_EQ(ex.answer.substr(ex.answer.size() - tail.size()), tail);
        const TaskScore s = score_completion(ex, ex.answer);
        EXPECT_TRUE(s.correct && s.full_match) << family << " " << ex.answer;
      }
    }
  }
}

TEST(Tasks, SameSeedSameTextOtherSeedOtherText) {
  for (const auto& family : task_family_names()) {
    const TaskExample a = gen(family, 5, 1024), b = gen(family, 5, 1024), c = gen(family, 6, 1024);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.answer, b.answer);
    EXPECT_NE(a.prompt, c.prompt);
  }
}

TEST(Tasks, TrainAndTestNeverShareAnExample) {
  // The shortest length has the least filler, so the most chance of a repeat.
  for (const auto& family : task_family_names()) {
    std::unordered_set<std::string> train;
    for (uint64_t seed = 0; seed < 3000; ++seed) {
      const TaskExample ex = gen(family, seed, 192);
      train.insert(ex.prompt + '\x01' + ex.answer);
    }
    for (uint64_t seed = 0; seed < 3000; ++seed) {
      const TaskExample ex = gen(family, seed, 192, TaskSplit::kTest);
      EXPECT_EQ(train.count(ex.prompt + '\x01' + ex.answer), 0u) << family << " test seed " << seed;
    }
  }
}

TEST(Tasks, RejectsBadOptions) {
  TaskOptions o;
  o.length = 100;
  EXPECT_EQ(generate_task("passkey", TaskSplit::kTrain, 0, o).status().code(),
            ErrorCode::kInvalidArgument);
  o = {};
  o.depth = 0.5;
  EXPECT_EQ(generate_task("kv_recall", TaskSplit::kTrain, 0, o).status().code(),
            ErrorCode::kInvalidArgument);
  o.depth = 1.5;
  EXPECT_EQ(generate_task("passkey", TaskSplit::kTrain, 0, o).status().code(),
            ErrorCode::kInvalidArgument);
  o = {};
  o.params = {{"pairs", 4}, {"colour", 2}};
  auto r = generate_task("kv_recall", TaskSplit::kTrain, 0, o);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("colour"), std::string::npos);
  o.params = {{"pairs", 99}};
  EXPECT_EQ(generate_task("kv_recall", TaskSplit::kTrain, 0, o).status().code(),
            ErrorCode::kInvalidArgument);
  o.params = {{"pairs", 2}, {"queries", 3}};
  EXPECT_EQ(generate_task("kv_recall", TaskSplit::kTrain, 0, o).status().code(),
            ErrorCode::kInvalidArgument);
  o.params = {{"pairs", 32}, {"queries", 4}};
  o.length = 256;  // 32 facts cannot fit
  r = generate_task("kv_recall", TaskSplit::kTrain, 0, o);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("too short"), std::string::npos);
  EXPECT_EQ(generate_task("passkey", TaskSplit::kTrain, uint64_t{1} << 63).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(parse_split("dev").ok());
}

TEST(Passkey, KeyIsTheNeedleAndDepthPlacesIt) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const TaskExample ex = gen("passkey", seed, 1024);
    const std::string body = body_of(ex);
    const size_t p = body.find("The pass key is ");
    ASSERT_NE(p, std::string::npos);
    const std::string key = body.substr(p + 16, body.find('.', p) - p - 16);
    EXPECT_EQ(key.size(), 5u);
    EXPECT_EQ(ex.final_answer, key);
    EXPECT_EQ(body.find("The pass key is ", p + 1), std::string::npos);  // exactly one needle
  }
  TaskOptions o;
  o.depth = 0.0;
  EXPECT_EQ(body_of(gen("passkey", 3, 2048, TaskSplit::kTrain, o)).rfind("The pass key is ", 0), 0u);
  o.depth = 1.0;
  const std::string end = body_of(gen("passkey", 3, 2048, TaskSplit::kTrain, o));
  ASSERT_GE(end.size(), 17u);
  EXPECT_EQ(end.substr(end.size() - 17), " is the pass key.");
  o.depth = 0.5;
  const std::string mid = body_of(gen("passkey", 3, 2048, TaskSplit::kTrain, o));
  const double at = static_cast<double>(mid.find("The pass key")) / static_cast<double>(mid.size());
  EXPECT_NEAR(at, 0.5, 0.08);
}

TEST(Passkey, OtherLengthKeepsTheKey) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(gen("passkey", seed, 256).final_answer, gen("passkey", seed, 4096).final_answer);
  }
}

TEST(KvRecall, AnswersFollowTheFacts) {
  for (int64_t length : {256, 1024, 2048}) {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const TaskExample ex = gen("kv_recall", seed, length);
      std::map<std::string, std::string> facts;
      for (const auto& s : sentences(body_of(ex))) {
        if (s.rfind("The code of ", 0) == 0) {
          // "The code of ABCD is 1234."
          facts[s.substr(12, 4)] = s.substr(20, 4);
        }
      }
      const std::string q = lines_of(ex.prompt)[2];
      ASSERT_EQ(q.rfind("Give the codes of ", 0), 0u);
      std::string expected, final_answer;
      for (size_t p = 18; p < q.size(); p += 6) {
        const std::string name = q.substr(p, 4);
        ASSERT_EQ(facts.count(name), 1u) << name;
        expected += name + " " + facts[name] + "\n";
        if (!final_answer.empty()) final_answer += ' ';
        final_answer += facts[name];
      }
      EXPECT_EQ(ex.answer, expected + "A: " + final_answer);
    }
  }
  TaskOptions o;
  o.params = {{"pairs", 16}, {"queries", 3}};
  const TaskExample ex = gen("kv_recall", 1, 1024, TaskSplit::kTrain, o);
  size_t n = 0;
  for (const auto& s : sentences(body_of(ex))) n += s.rfind("The code of ", 0) == 0;
  EXPECT_EQ(n, 16u);
  EXPECT_EQ(lines_of(ex.answer).size(), 4u);
}

TEST(VarTrack, EachHopFollowsTheAssignments) {
  for (int64_t length : {256, 1024, 2048}) {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const TaskExample ex = gen("var_track", seed, length);
      std::map<std::string, std::string> assign;
      for (const auto& s : sentences(body_of(ex))) {
        if (s.rfind("VAR ", 0) == 0) {
          const std::string name = s.substr(4, 3);
          EXPECT_EQ(assign.count(name), 0u) << "assigned twice: " << name;
          assign[name] = s.substr(10, s.size() - 11);
        }
      }
      const std::string q = lines_of(ex.prompt)[2];
      std::string var = q.substr(21, 3);
      std::string expected;
      while (assign.count(var)) {
        expected += var + " = " + assign[var] + "\n";
        var = assign[var];
      }
      EXPECT_EQ(ex.answer, expected + "A: " + var);
    }
  }
  TaskOptions o;
  o.params = {{"hops", 5}, {"chains", 3}};
  const TaskExample ex = gen("var_track", 2, 1024, TaskSplit::kTrain, o);
  EXPECT_EQ(lines_of(ex.answer).size(), 6u);
}

TEST(Arithmetic, TraceComputesTheProblem) {
  for (int64_t length : {256, 1024, 2048}) {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const TaskExample ex = gen("arithmetic", seed, length);
      const std::string body = body_of(ex);
      const size_t p = body.find("Problem: ");
      ASSERT_NE(p, std::string::npos);
      std::stringstream ss(body.substr(p + 9, body.find('.', p) - p - 9));
      long total;
      ss >> total;
      std::vector<std::pair<char, long>> ops;
      char op;
      long v;
      while (ss >> op >> v) ops.push_back({op, v});
      ASSERT_GE(ops.size(), 1u);
      const auto lines = lines_of(ex.answer);
      ASSERT_EQ(lines.size(), ops.size() + 1);
      for (size_t i = 0; i < ops.size(); ++i) {
        const long next = ops[i].first == '+' ? total + ops[i].second : total - ops[i].second;
        ASSERT_GE(next, 0);
        ASSERT_LE(next, 9999);
        char buf[64];
        std::snprintf(buf, sizeof buf, "%04ld %c %04ld = %04ld", total, ops[i].first,
                      ops[i].second, next);
        std::string want = buf;
        if (i + 1 < ops.size()) {
          want += ", then";
          for (size_t j = i + 1; j < ops.size(); ++j) {
            std::snprintf(buf, sizeof buf, " %c %04ld", ops[j].first, ops[j].second);
            want += buf;
          }
        }
        EXPECT_EQ(lines[i], want);
        total = next;
      }
      char fin[16];
      std::snprintf(fin, sizeof fin, "%04ld", total);
      EXPECT_EQ(ex.final_answer, fin);
    }
  }
  TaskOptions o;
  o.params = {{"steps", 7}};
  EXPECT_EQ(lines_of(gen("arithmetic", 4, 1024, TaskSplit::kTrain, o).answer).size(), 8u);
}

TEST(WordCount, ScratchpadWalksTheNumberedSightings) {
  for (int64_t length : {256, 1024, 2048, 4096}) {
    for (uint64_t seed = 0; seed < 40; ++seed) {
      const TaskExample ex = gen("word_count", seed, length);
      // Sightings are the body's sentences "#k NAME.", numbered 1, 2, ... in order.
      std::vector<std::string> order;
      for (const auto& s : sentences(body_of(ex))) {
        if (s[0] != '#') continue;
        const size_t sp = s.find(' ');
        ASSERT_NE(sp, std::string::npos) << s;
        EXPECT_EQ(s.substr(1, sp - 1), std::to_string(order.size() + 1)) << s;
        ASSERT_EQ(s.size(), sp + 6) << s;
        order.push_back(s.substr(sp + 1, 4));
      }
      std::map<std::string, int> counts;
      std::string expected;
      for (size_t k = 0; k < order.size(); ++k) {
        const int c = ++counts[order[k]];
        // Appended piece by piece: GCC 12's -Wrestrict misfires on chained string operator+.
        expected += '#';
        expected += std::to_string(k + 1);
        expected += ' ';
        expected += order[k];
        expected += ' ';
        expected += std::to_string(c);
        expected += '\n';
      }
      const std::string q = lines_of(ex.prompt)[2];
      std::string final_answer;
      for (size_t p = 6; p < q.size(); p += 6) {
        const std::string name = q.substr(p, 4);
        ASSERT_GE(counts[name], 1);
        ASSERT_LE(counts[name], 9);
        // One summary line per asked word, in the question's order.
        expected += name;
        expected += ' ';
        expected += std::to_string(counts[name]);
        expected += '\n';
        if (!final_answer.empty()) final_answer += ' ';
        final_answer += std::to_string(counts[name]);
      }
      EXPECT_EQ(ex.answer, expected + "A: " + final_answer);
    }
  }
}

}  // namespace
}  // namespace frugal::eval
