// The scorer's documented edge cases (src/frugal/eval/score.h), on hand-written completions.
#include <gtest/gtest.h>

#include "frugal/eval/score.h"

namespace frugal::eval {
namespace {

TaskExample example() {
  TaskExample ex;
  ex.family = "var_track";
  ex.answer = "ABC = QWE\nQWE = 52183\nA: 52183";
  ex.final_answer = "52183";
  return ex;
}

TEST(Score, ExactCompletionIsCorrectAndFull) {
  const TaskScore s = score_completion(example(), "ABC = QWE\nQWE = 52183\nA: 52183");
  EXPECT_TRUE(s.found);
  EXPECT_TRUE(s.correct);
  EXPECT_TRUE(s.full_match);
  EXPECT_EQ(s.extracted, "52183");
}

TEST(Score, SurroundingWhitespaceIsTrimmed) {
  const TaskScore s = score_completion(example(), "  \nABC = QWE\nQWE = 52183\nA: 52183 \t\r\n");
  EXPECT_TRUE(s.correct);
  EXPECT_TRUE(s.full_match);
  // Spaces around the final answer do not matter for `correct`; the full match is exact text.
  const TaskScore spaced = score_completion(example(), "ABC = QWE\nQWE = 52183\n  A:   52183");
  EXPECT_TRUE(spaced.correct);
  EXPECT_FALSE(spaced.full_match);
  EXPECT_TRUE(score_completion(example(), "A:52183").correct);
}

TEST(Score, TextAfterTheAnswerLineIsIgnored) {
  const TaskScore s = score_completion(example(), "ABC = QWE\nQWE = 52183\nA: 52183\nA: 11111\nxyz");
  EXPECT_TRUE(s.correct);
  EXPECT_TRUE(s.full_match);
}

TEST(Score, TextAfterTheAnswerOnTheSameLineCounts) {
  const TaskScore s = score_completion(example(), "ABC = QWE\nQWE = 52183\nA: 52183 or 1");
  EXPECT_FALSE(s.correct);
  EXPECT_EQ(s.extracted, "52183 or 1");
  EXPECT_FALSE(score_completion(example(), "A: 52183A: 52183").correct);
}

TEST(Score, WrongScratchpadKeepsTheFinalAnswerButNotTheFullMatch) {
  const TaskScore s = score_completion(example(), "ABC = XYZ\nA: 52183");
  EXPECT_TRUE(s.correct);
  EXPECT_FALSE(s.full_match);
}

TEST(Score, MissingAnswerLineIsWrong) {
  const TaskScore s = score_completion(example(), "ABC = QWE\nQWE = 52183\n52183");
  EXPECT_FALSE(s.found);
  EXPECT_FALSE(s.correct);
  EXPECT_FALSE(s.full_match);
  EXPECT_EQ(s.extracted, "");
  EXPECT_FALSE(score_completion(example(), "").correct);
  EXPECT_FALSE(score_completion(example(), "A").correct);
}

TEST(Score, CaseAndInnerSpacesMatter) {
  EXPECT_FALSE(score_completion(example(), "a: 52183").found);
  TaskExample ex = example();
  ex.final_answer = "3 7";
  EXPECT_TRUE(score_completion(ex, "A: 3 7").correct);
  EXPECT_FALSE(score_completion(ex, "A: 3  7").correct);
  EXPECT_FALSE(score_completion(ex, "A: 37").correct);
}

TEST(Score, AnswerLineMustStartWithTheMarker) {
  // "A:" inside a line is not an answer line; the first line that starts with it is.
  EXPECT_EQ(extract_final_answer("x A: 1\nA: 2\nA: 3"), "2");
  EXPECT_EQ(extract_final_answer("\tA: 4"), "4");
}

}  // namespace
}  // namespace frugal::eval
