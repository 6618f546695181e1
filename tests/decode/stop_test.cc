#include "frugal/decode/stop.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace frugal {
namespace {

struct Fed {
  std::vector<std::string> emitted;  // per push
  std::string text;                  // all emitted text
  StopReason reason = StopReason::kNone;
};

Fed feed(StopChecker& c, const std::vector<std::string>& pieces, TokenId id = 1) {
  Fed r;
  for (const auto& p : pieces) {
    StopUpdate u = c.push(id, p);
    r.emitted.push_back(u.text);
    r.text += u.text;
    if (u.reason != StopReason::kNone) {
      r.reason = u.reason;
      break;
    }
  }
  return r;
}

TEST(StopChecker, StopInsideOneToken) {
  StopChecker c({.stop = {"END"}});
  const Fed r = feed(c, {"Hello ", "there END world", "never"});
  EXPECT_EQ(r.text, "Hello there ");
  EXPECT_EQ(r.reason, StopReason::kStopString);
  EXPECT_EQ(c.matched_stop(), "END");
  EXPECT_EQ(c.n_generated(), 2);
  EXPECT_TRUE(c.done());
  // Calls after the end change nothing.
  EXPECT_EQ(c.push(1, "more").text, "");
  EXPECT_EQ(c.finish().text, "");
  EXPECT_EQ(c.n_generated(), 2);
}

TEST(StopChecker, StopSpanningTokensIsHeldBackThenDropped) {
  StopChecker c({.stop = {"</s>"}});
  const Fed r = feed(c, {"Hel", "lo <", "/s", "> more"});
  ASSERT_EQ(r.emitted.size(), 4u);
  EXPECT_EQ(r.emitted[0], "Hel");
  EXPECT_EQ(r.emitted[1], "lo ");  // "<" may begin "</s>"
  EXPECT_EQ(r.emitted[2], "");     // "</s" still may
  EXPECT_EQ(r.emitted[3], "");
  EXPECT_EQ(r.text, "Hello ");
  EXPECT_EQ(r.reason, StopReason::kStopString);
}

TEST(StopChecker, HeldTextReleasedWhenItIsNotAStop) {
  StopChecker c({.stop = {"</s>"}});
  EXPECT_EQ(c.push(1, "a<").text, "a");
  EXPECT_EQ(c.held_back(), "<");
  EXPECT_EQ(c.push(1, "/x").text, "</x");
  EXPECT_EQ(c.held_back(), "");
  EXPECT_FALSE(c.done());
}

TEST(StopChecker, OverlappingPrefixKeepsLongestCandidate) {
  // "aaab" with stop "aab": after "aaa" only the first "a" is safe.
  StopChecker c({.stop = {"aab"}});
  const Fed r = feed(c, {"a", "a", "a", "b"});
  EXPECT_EQ(r.emitted[0], "");
  EXPECT_EQ(r.emitted[1], "");
  EXPECT_EQ(r.emitted[2], "a");
  EXPECT_EQ(r.emitted[3], "");
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.reason, StopReason::kStopString);
}

TEST(StopChecker, EarliestOfSeveralStopsWins) {
  StopChecker c({.stop = {"world", "lo w", "xyz"}});
  const Fed r = feed(c, {"hel", "lo world"});
  EXPECT_EQ(r.text, "hel");
  EXPECT_EQ(c.matched_stop(), "lo w");
  StopChecker d({.stop = {"ab", "abc"}});  // same start: first listed
  feed(d, {"xabc"});
  EXPECT_EQ(d.matched_stop(), "ab");
}

TEST(StopChecker, MaxTokensFlushesHeldText) {
  StopChecker c({.stop = {"STOP"}, .max_tokens = 3});
  const Fed r = feed(c, {"one ", "two ", "three S"});
  EXPECT_EQ(r.reason, StopReason::kLength);
  EXPECT_EQ(r.text, "one two three S");
  EXPECT_EQ(c.n_generated(), 3);
  // A stop string in the last allowed token still wins over the limit.
  StopChecker d({.stop = {"STOP"}, .max_tokens = 2});
  const Fed r2 = feed(d, {"a", "bSTOPc"});
  EXPECT_EQ(r2.reason, StopReason::kStopString);
  EXPECT_EQ(r2.text, "ab");
}

TEST(StopChecker, ZeroMaxTokensIsDoneAtOnce) {
  StopChecker c({.max_tokens = 0});
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.reason(), StopReason::kLength);
}

TEST(StopChecker, EogPredicateEndsAndFlushes) {
  StopChecker c({.stop = {"<|im_end|>"}, .is_eog = [](TokenId id) { return id == 2; }});
  EXPECT_EQ(c.push(5, "hi <|im").text, "hi ");
  const StopUpdate u = c.push(2, "</s>");
  EXPECT_EQ(u.reason, StopReason::kEog);
  EXPECT_EQ(u.text, "<|im");  // not a stop string after all; the EOG token's own text is dropped
  EXPECT_EQ(c.n_generated(), 2);
  EXPECT_STREQ(stop_reason_name(c.reason()), "eog");
}

TEST(StopChecker, FinishReleasesHeldText) {
  StopChecker c({.stop = {"###"}});
  EXPECT_EQ(c.push(1, "x ##").text, "x ");
  const StopUpdate u = c.finish();
  EXPECT_EQ(u.text, "##");
  EXPECT_EQ(u.reason, StopReason::kFinished);
}

TEST(StopChecker, NoStopsStreamsEverything) {
  StopChecker c({});
  EXPECT_EQ(c.push(1, "abc").text, "abc");
  EXPECT_EQ(c.push(1, "").text, "");
  EXPECT_FALSE(c.done());
}

TEST(StopChecker, RandomSplitsMatchReference) {
  // Small alphabet so that partial matches and overlaps are frequent.
  const std::vector<std::string> stops = {"ab<", "b/b", "<</"};
  std::mt19937 gen(2024);
  const std::string alphabet = "ab</";
  for (int trial = 0; trial < 500; ++trial) {
    std::string full;
    const int len = 1 + static_cast<int>(gen() % 40);
    for (int i = 0; i < len; ++i) full += alphabet[gen() % alphabet.size()];
    // Reference: the text up to the earliest occurrence of any stop string.
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, full.find(s));
    const std::string expected = full.substr(0, cut);

    StopChecker c({.stop = stops});
    std::string emitted;
    size_t pos = 0;
    while (pos < full.size() && !c.done()) {
      const size_t n = std::min<size_t>(full.size() - pos, gen() % 4);  // empty pieces too
      const StopUpdate u = c.push(1, std::string_view(full).substr(pos, n));
      pos += n;
      emitted += u.text;
      ASSERT_EQ(expected.compare(0, emitted.size(), emitted), 0)
          << "emitted text must always be a prefix of the final text: " << full;
      if (!c.done()) {
        // Nothing is lost, and only a possible stop-string start is held.
        ASSERT_EQ(emitted + std::string(c.held_back()), full.substr(0, pos)) << full;
        const std::string held(c.held_back());
        bool is_prefix = held.empty();
        for (const auto& s : stops) is_prefix |= held.size() < s.size() && s.compare(0, held.size(), held) == 0;
        ASSERT_TRUE(is_prefix) << held;
      }
    }
    if (!c.done()) emitted += c.finish().text;
    EXPECT_EQ(emitted, expected) << full;
    EXPECT_EQ(c.reason() == StopReason::kStopString, cut != std::string::npos) << full;
  }
}

TEST(StopChecker, InvalidOptionsNameTheField) {
  auto r = StopChecker::create({.stop = {"ok", ""}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("stop[1]"), std::string::npos) << r.status().message();
  auto r2 = StopChecker::create({.max_tokens = -5});
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("max_tokens"), std::string::npos);
  EXPECT_TRUE(StopChecker::create({.stop = {"a"}, .max_tokens = 10}).ok());
}

}  // namespace
}  // namespace frugal
