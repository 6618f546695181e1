// JSONL lines of task examples parse back (with an independent JSON parser) to the same fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "frugal/eval/jsonl.h"

namespace frugal::eval {
namespace {

TEST(Jsonl, EscapesControlCharactersAndQuotes) {
  EXPECT_EQ(json_escape("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
}

TEST(Jsonl, ExamplesRoundTrip) {
  for (const auto& family : task_family_names()) {
    TaskOptions o;
    o.length = 512;
    auto ex = generate_task(family, TaskSplit::kTest, 17, o);
    ASSERT_TRUE(ex.ok());
    const auto j = nlohmann::json::parse(example_to_json(*ex));
    EXPECT_EQ(j["family"], family);
    EXPECT_EQ(j["split"], "test");
    EXPECT_EQ(j["seed"], 17);
    EXPECT_EQ(j["length"], 512);
    EXPECT_EQ(j["tokens"], ex->n_tokens());
    EXPECT_EQ(j["prompt"], ex->prompt);
    EXPECT_EQ(j["answer"], ex->answer);
    EXPECT_EQ(j["final_answer"], ex->final_answer);
  }
}

}  // namespace
}  // namespace frugal::eval
