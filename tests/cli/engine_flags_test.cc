// The engine flags shared by run, eval, serve and bench (tools/engine_options.h): every command
// lists the same flags, refuses a bad value with the same one-line message naming the flag, and
// refuses a value it cannot honour rather than ignoring it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli/run_frugal.h"
#include "cli/tiny_model.h"
#include "frugal/synth/random_model.h"

namespace frugal {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kCommands = {"run", "eval", "serve", "bench"};
const std::vector<std::string> kSharedFlags = {"--threads",  "--device",    "--kv-type",           "--kv-policy",
                                               "--kv-budget", "--kv-budget-of", "--kv-buffer",     "--kv-protect-prompt",
                                               "--kv-seed",  "--kv-quant",  "--kv-memory", "--spec",
                                               "--spec-k",   "--spec-skip", "--spec-candidates", "--spec-rule",
                                               "--draft",    "--draft-memory", "--prefill-sparse", "--sparse-min-blocks",
                                               "--sparse-last-q", "--sparse-vertical", "--sparse-slash", "--flex-gamma",
                                               "--flex-tau", "--crisp-gamma", "--crisp-floor", "--crisp-route"};

class EngineFlags : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tiny_ = new TinyModelDir("frugal_engine_flags_");
    dir_ = &tiny_->dir;
    model_ = &tiny_->model;
  }
  static void TearDownTestSuite() { delete tiny_; }
  // The command with the model and what else it needs to reach its engine options (run: a prompt).
  static std::string command(const std::string& cmd, const std::string& flags) {
    return cmd + " -m " + *model_ + (cmd == "run" ? " -p hi" : "") + " " + flags;
  }
  static inline TinyModelDir* tiny_ = nullptr;
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
      {"--kv-quant int3", "--kv-quant: 'int3' is not none, int8, int4, hyquant or hbq"},
      {"--kv-memory 12X", "--kv-memory: '12X' is not a size (e.g. 256MiB, 2G, 1048576)"},
      {"--kv-policy bogus", "--kv-policy: kv policy 'bogus' is unknown"},
      {"--kv-budget abc", "--kv-budget: 'abc' is not a number"},
      {"--kv-budget-of prompt", "--kv-budget-of: 'prompt' is not trace or generated"},
      {"--kv-buffer 1.5", "--kv-buffer: '1.5' is not a 32-bit integer"},
      {"--kv-seed x7", "--kv-seed: 'x7' is not an unsigned 64-bit integer"},
      {"--threads -1", "--threads: -1 is negative (0: all cores)"},
      {"--device tpu", "--device 'tpu': expected cpu or cuda"},
      {"--spec medusa", "--spec: speculative method 'medusa' is not none, draft, ngram, layerskip, swift, conflayers or memspec"},
      {"--spec-k 0", "--spec-k: 0 is not in [1, 32]"},
      {"--spec-candidates 9", "--spec-candidates: 9 is not in [1, 8]"},
      {"--spec-candidates two", "--spec-candidates: 'two' is not a number"},
      {"--spec-confidence 1.5", "--spec-confidence: 1.5 is not a probability in [0, 1]"},
      {"--spec-confidence high", "--spec-confidence: 'high' is not a number"},
      {"--spec-search-every 0", "--spec-search-every: 0 must be at least 1 (drafting calls between search steps)"},
      {"--spec-seed -3", "--spec-seed: '-3' is not an unsigned 64-bit integer"},
      {"--spec-rule spectr", "--spec-rule: multi-candidate rule 'spectr' is not standard or resispec"},
      {"--spec-selector greedy", "--spec-selector: draft selector 'greedy' is not predict or bandit"},
      {"--spec-drafts ngram,,a.gguf", "--spec-drafts: empty entry in 'ngram,,a.gguf'"},
      {"--draft-memory 3Q", "--draft-memory: '3Q' is not a size"},
      {"--spec ngram --draft x.gguf", "--draft: a draft model is for --spec draft, not --spec ngram"},
      {"--prefill-sparse xattention",
       "--prefill-sparse: 'xattention' is not a prefill sparsity method (none, minference, flexprefill or crisp)"},
      {"--sparse-slash -5", "--sparse-slash: -5 is not in [0, 1073741824]"},
      {"--sparse-last-q abc", "--sparse-last-q: 'abc' is not an integer"},
      {"--sparse-min-blocks 0", "--sparse-min-blocks: 0 is not in [1, 1073741824]"},
      {"--flex-gamma 0", "--flex-gamma: 0 is not in (0, 1]"},
      {"--flex-tau 1.5", "--flex-tau: 1.5 is not in [0, 1]"},
      {"--crisp-floor x", "--crisp-floor: 'x' is not a number"},
      {"--crisp-route 2", "--crisp-route: 2 is not in [0, 1]"},
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

TEST_F(EngineFlags, SpeculationIsRefusedWhereItCannotRun) {
  expect_clean_failure(run_frugal(command("run", "--spec ngram --kv-policy window --kv-budget 32 --kv-buffer 8")),
                       "frugal run: speculative decoding (--spec ngram) needs a keep-everything unquantized KV cache");
  expect_clean_failure(run_frugal(command("run", "--spec draft")),
                       "frugal run: --spec draft: name the draft model with --draft MODEL.gguf");
  expect_clean_failure(run_frugal(command("run", "--draft /nonexistent/draft.gguf")), "frugal run: --draft");
  expect_clean_failure(run_frugal(command("bench", "--spec ngram")), "frugal bench: --spec ngram: bench measures");
  expect_clean_failure(run_frugal(command("bench", "--spec-candidates 2")),
                       "frugal bench: --spec-candidates 2: bench measures");
  expect_clean_failure(run_frugal(command("run", "--spec ngram --spec-candidates 2")),
                       "frugal run: speculative: spec-candidates = 2 needs a drafter that samples its drafts (draft, "
                       "layerskip, swift or conflayers); ngram proposes one continuation with certainty");
  // Self-speculation's own flags.
  expect_clean_failure(run_frugal(command("run", "--spec ngram --spec-skip-set=-x")),
                       "frugal run: speculative: spec-skip-set '-x' freezes the skip set of swift or conflayers, not "
                       "of ngram");
  expect_clean_failure(run_frugal(command("run", "--spec swift --spec-skip-set=-x-")),
                       "frugal run: skip set '-x-' has 3 letters for a model of 2 layers");
  expect_clean_failure(run_frugal(command("run", "--spec conflayers --spec-skip 2")),
                       "frugal run: speculative: spec-skip = 2 does not apply to conflayers");
  // The tiny model has 2 layers: nothing between the first and the last to skip.
  expect_clean_failure(run_frugal(command("run", "--spec swift")),
                       "frugal run: swift drafting needs at least 3 layers (the first and last always run); the model "
                       "has 2");
  expect_clean_failure(run_frugal(command("run", "--spec-candidates 3")),
                       "frugal run: speculative: spec-candidates = 3 needs a drafter (--spec draft or layerskip); plain "
                       "decoding has no drafts");
  // The tiny model as its own draft: not smaller than its target.
  expect_clean_failure(run_frugal(command("run", "--draft " + *model_)),
                       "frugal run: draft model: its weights take");
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
  r = run_frugal(command("run", "-n 6 --temp 0 -t 1 --spec ngram --spec-k 4 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"method\":\"ngram\""), std::string::npos) << r.out;
  // The tiny model as its own draft, under an explicit budget (it is not smaller than itself).
  r = run_frugal(command("run", "-n 6 --temp 1 -t 1 --draft " + *model_ +
                                    " --draft-memory 1GiB --spec-k 3 --spec-candidates 2 --spec-rule resispec --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"candidates\":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"rule\":\"resispec\""), std::string::npos) << r.out;
  r = run_frugal(command("eval", "--tasks passkey --lengths 192 -n 1 --no-ref -q -t 1 --kv-quant int8"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kv-quant=int8"), std::string::npos) << "the configuration's label names the flag: " << r.out;
}

}  // namespace
}  // namespace frugal
