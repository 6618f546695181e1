// One per-request record from each writer (run --json, bench --json, eval --out; serve's request
// log in tests/server/engine_test.cc) validated against docs/record.schema.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/run_frugal.h"
#include "cli/tiny_model.h"
#include "frugal/synth/random_model.h"
#include "record_schema.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class RecordSchema : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new TinyModelDir("frugal_record_");
    dir_ = &tiny_->dir;
    model_ = &tiny_->model;
  }
  static void TearDownTestSuite() { delete tiny_; }
  static schema_check::MiniSchema schema() {
    return schema_check::MiniSchema::load(std::string(FRUGAL_SOURCE_DIR) + "/docs/record.schema.json");
  }
  // The checks every record must pass beyond the schema: no estimate in place of a measurement.
  static void expect_honest(const json& rec) {
    for (const char* phase : {"prefill", "decode"}) {
      const json& e = rec["phases"][phase]["energy"];
      if (e["source"] == "unavailable") {
        EXPECT_TRUE(e["joules"].is_null()) << rec.dump();
        EXPECT_FALSE(e["reliable"].get<bool>());
      }
      // A phase that ran did work, and the estimate prices it (a pp bench test has no decode).
      if (rec[std::string(phase) + "_tokens"].get<int64_t>() > 0) {
        EXPECT_GT(rec["phases"][phase]["estimate"]["joules"].get<double>(), 0) << phase;
        EXPECT_GT(rec["phases"][phase]["work"]["weight_bytes_read"].get<double>(), 0) << phase;
      }
    }
  }
  static TinyModelDir* tiny_;
  static fs::path* dir_;
  static std::string* model_;
};
TinyModelDir* RecordSchema::tiny_ = nullptr;
fs::path* RecordSchema::dir_ = nullptr;
std::string* RecordSchema::model_ = nullptr;

TEST_F(RecordSchema, RunJson) {
  const CmdResult r = run_frugal("run -m " + *model_ + " -p 'a b c' -n 4 --temp 0 --ignore-eos --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(schema().validate(j["timings"]), "") << j["timings"].dump(1);
  expect_honest(j["timings"]);
  EXPECT_EQ(j["timings"]["decode_tokens"], 3);
}

TEST_F(RecordSchema, RunJsonWithSparsePrefill) {
  // A prompt too short for sparse prefill's blocks: it runs dense and the record says so, for
  // every method.
  for (const char* method : {"minference", "flexprefill", "crisp"}) {
    const CmdResult r = run_frugal("run -m " + *model_ + " -p 'a b c' -n 2 --temp 0 --ignore-eos --json -t 1 " +
                                   "--prefill-sparse " + method);
    ASSERT_EQ(r.exit_code, 0) << method << ": " << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(schema().validate(j["timings"]), "") << method << ": " << j["timings"].dump(1);
    const json& ps = j["timings"]["prefill_sparse"];
    EXPECT_EQ(ps["method"], method);
    EXPECT_TRUE(ps["short_prompt_dense"].get<bool>());
    EXPECT_EQ(ps["sparse_calls"], 0);
    EXPECT_EQ(ps["heads_vertical_slash"], 0);
    EXPECT_EQ(ps["heads_query_aware"], 0);
  }
}

TEST_F(RecordSchema, RunJsonWithTileMix) {
  // A prompt too short for TileMix's tiles: it runs float and the record says so.
  const CmdResult r =
      run_frugal("run -m " + *model_ + " -p 'a b c' -n 2 --temp 0 --ignore-eos --json -t 1 --tilemix-int8 0.5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(schema().validate(j["timings"]), "") << j["timings"].dump(1);
  const json& tm = j["timings"]["tilemix"];
  EXPECT_EQ(tm["int8_fraction"], 0.5);
  EXPECT_TRUE(tm["short_prompt_float"].get<bool>());
  EXPECT_EQ(tm["routed_calls"], 0);
  EXPECT_EQ(tm["tiles_int8"], 0);
  // Out of range: refused, naming the flag and its range.
  const CmdResult bad = run_frugal("run -m " + *model_ + " -p 'a b c' -n 2 -t 1 --tilemix-int8 1.5");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--tilemix-int8"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("[0, 1]"), std::string::npos) << bad.err;
}

TEST_F(RecordSchema, BenchJson) {
  const CmdResult r = run_frugal("bench -m " + *model_ + " -p 16 -n 4 -r 2 -t 1 --no-roofline --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["tests"].size(), 2u);
  for (const json& t : j["tests"]) {
    EXPECT_EQ(schema().validate(t["record"]), "") << t["record"].dump(1);
    EXPECT_GT(t["estimate"]["joules_per_token"].get<double>(), 0);
  }
  // Two repetitions summed: pp16 ran 32 prompt tokens, tg4 8 decode tokens.
  EXPECT_EQ(j["tests"][0]["record"]["prefill_tokens"], 32);
  EXPECT_EQ(j["tests"][1]["record"]["decode_tokens"], 8);
  expect_honest(j["tests"][0]["record"]);
  expect_honest(j["tests"][1]["record"]);
}

TEST_F(RecordSchema, EvalOut) {
  const std::string out = (*dir_ / "eval.json").string();
  const CmdResult r = run_frugal("eval -m " + *model_ + " --tasks kv_recall --lengths 192 -n 1 --no-ref -q -t 1 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(slurp(out));
  const json& rec = j[0]["examples"][0]["timings"];
  EXPECT_EQ(schema().validate(rec), "") << rec.dump(1);
  expect_honest(rec);
}

TEST_F(RecordSchema, ValidatorRejectsWhatTheSchemaForbids) {
  const CmdResult r = run_frugal("run -m " + *model_ + " -p 'a b' -n 2 --temp 0 --json -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json good = json::parse(r.out)["timings"];
  json bad = good;
  bad["phases"]["decode"]["energy"]["source"] = "estimate";  // an estimate passed off as a source
  EXPECT_NE(schema().validate(bad).find("$.phases.decode.energy.source"), std::string::npos);
  bad = good;
  bad["phases"]["prefill"].erase("work");
  EXPECT_NE(schema().validate(bad).find("required property 'work'"), std::string::npos);
  bad = good;
  bad["prefill_tokens"] = -1;
  EXPECT_NE(schema().validate(bad).find("below the minimum"), std::string::npos);
  bad = good;
  bad["extra"] = 1;
  EXPECT_NE(schema().validate(bad).find("'extra' is not in the schema"), std::string::npos);
}

}  // namespace
}  // namespace frugal
