// The engine flags shared by run, eval, serve and bench (tools/engine_options.h): every command
// lists the same flags, refuses a bad value with the same one-line message naming the flag, and
// refuses a value it cannot honour rather than ignoring it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/run_frugal.h"
#include "frugal/synth/random_model.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kCommands = {"run", "eval", "serve", "bench"};
const std::vector<std::string> kSharedFlags = {"--threads",  "--device",    "--kv-type",           "--kv-policy",
                                               "--kv-budget", "--kv-budget-of", "--kv-buffer",     "--kv-protect-prompt",
                                               "--kv-seed",  "--kv-quant",  "--kv-memory"};

class EngineFlags : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("frugal_engine_flags_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    auto opts = synth::random_model_preset("tiny-llama", FRUGAL_SHARED_MODELS_DIR);
    ASSERT_TRUE(opts.ok()) << opts.status().to_string();
    opts->n_layer = 2;
    opts->weight_type = "F32";
    model_ = new std::string((*dir_ / "tiny.gguf").string());
    ASSERT_TRUE(synth::write_random_model(*opts, *model_).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete model_;
  }
  // The command with the model and what else it needs to reach its engine options (run: a prompt).
  static std::string command(const std::string& cmd, const std::string& flags) {
    return cmd + " -m " + *model_ + (cmd == "run" ? " -p hi" : "") + " " + flags;
  }
  static inline fs::path* dir_ = nullptr;
  static inline std::string* model_ = nullptr;
};

TEST_F(EngineFlags, EveryCommandListsTheSameFlags) {
  for (const auto& cmd : kCommands) {
    const CmdResult r = run_frugal(cmd + " --help");
    ASSERT_EQ(r.exit_code, 0) << cmd << ": " << r.err;
    for (const auto& flag : kSharedFlags) {
      // Followed by a space: "--kv-budget" must not be found inside "--kv-budget-of".
      EXPECT_NE(r.out.find(flag + " "), std::string::npos) << cmd << " --help does not list " << flag;
    }
  }
}

TEST_F(EngineFlags, EveryCommandRefusesABadValueWithTheSameMessage) {
  struct Case {
    std::string flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--kv-type f8", "--kv-type: 'f8' is not f16 or f32"},
      {"--kv-quant int3", "--kv-quant: 'int3' is not none, int8, int4 or hyquant"},
      {"--kv-memory 12X", "--kv-memory: '12X' is not a size (e.g. 256MiB, 2G, 1048576)"},
      {"--kv-policy bogus", "--kv-policy: kv policy 'bogus' is unknown"},
      {"--kv-budget abc", "--kv-budget: 'abc' is not a number"},
      {"--kv-budget-of prompt", "--kv-budget-of: 'prompt' is not trace or generated"},
      {"--kv-buffer 1.5", "--kv-buffer: '1.5' is not a 32-bit integer"},
      {"--kv-seed x7", "--kv-seed: 'x7' is not an unsigned 64-bit integer"},
      {"--threads -1", "--threads: -1 is negative (0: all cores)"},
      {"--device tpu", "--device 'tpu': expected cpu or cuda"},
  };
  for (const auto& cmd : kCommands) {
    for (const auto& c : cases) {
      SCOPED_TRACE(cmd + " " + c.flags);
      expect_clean_failure(run_frugal(command(cmd, c.flags)), "frugal " + cmd + ": " + c.message);
    }
  }
}

TEST_F(EngineFlags, ServeRefusesAnImpossibleDefaultPolicyAtStartup) {
  expect_clean_failure(run_frugal(command("serve", "--kv-policy snapkv")),
                       "frugal serve: kv-budget for policy 'snapkv' must be a token count (>= 1) or a fraction");
  expect_clean_failure(run_frugal(command("serve", "--kv-policy random --kv-budget 32 --kv-buffer 64")),
                       "frugal serve: kv-budget (32 tokens) must exceed kv-buffer (64)");
}

TEST_F(EngineFlags, BenchKeepsEveryTokenAndRefusesEviction) {
  expect_clean_failure(run_frugal(command("bench", "--kv-policy random --kv-budget 0.5")),
                       "frugal bench: --kv-policy random: bench keeps every token (full)");
  expect_clean_failure(run_frugal(command("bench", "--kv-memory 1M")),
                       "frugal bench: --kv-memory: bench sizes the cache to each test");
}

TEST_F(EngineFlags, GoodValuesAreHonoured) {
  CmdResult r = run_frugal(command("run", "-n 3 --temp 0 -t 1 --kv-type f32 --kv-policy window --kv-budget 8 "
                                          "--kv-buffer 2 --kv-quant int8 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"policy\":\"window\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"quant\":\"int8\""), std::string::npos) << r.out;
  r = run_frugal(command("bench", "-p 8 -n 2 -r 1 -t 1 --kv-type f32 --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_frugal(command("bench", "-p 8 -n 2 -r 1 -t 1 --kv-quant int8 --no-roofline --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"kv_quant\": \"int8\""), std::string::npos) << r.out;
  r = run_frugal(command("eval", "--tasks passkey --lengths 192 -n 1 --no-ref -q -t 1 --kv-quant int8"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kv-quant=int8"), std::string::npos) << "the configuration's label names the flag: " << r.out;
}

}  // namespace
}  // namespace frugal
