// The evaluation protocol: run a suite (task families x lengths x n examples) against one engine
// configuration, score exact-match answers, and compare next-token distributions with a
// reference configuration teacher-forced on the same texts. Every technique is measured through
// this one path, so results are comparable across methods.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "frugal/engine/generate.h"
#include "frugal/eval/task.h"

namespace frugal::eval {

struct EvalSuite {
  std::vector<std::string> families;   // empty: every registered family
  // Target tokens per example. The default suite is the default model's certified lengths (its
  // model card): every family at 256 and 512 tokens, n = 200, in under 10 minutes on 2 cores.
  std::vector<int64_t> lengths{256, 512};
  int n = 200;                         // examples per (family, length)
  uint64_t seed = 0;                   // example i uses seed + i
  TaskSplit split = TaskSplit::kTest;
  int kl_examples = 20;                // teacher-forced comparisons per cell (0: none)
};

struct EvalConfig {
  std::string label;       // shown in tables, e.g. "kv-type=f16"
  // Used as given: GenerateOptions' default samples (temperature 0.8, top-k 40, ...); `frugal eval`
  // sets sampling.temperature = 0 for greedy decoding, and so must any caller that wants greedy.
  GenerateOptions gen;
};

struct ExampleResult {
  std::string family;
  int64_t length = 0;
  uint64_t seed = 0;
  bool correct = false;
  bool full_match = false;
  std::string expected;
  std::string extracted;
  std::string completion;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  Timings timings;
  int64_t kv_rounds = 0;    // eviction rounds during this example's generation
  double kv_round_ms = 0;   // their total time
  double kl = -1;     // mean KL(reference || config) over answer positions; -1: not measured
  double top1 = -1;   // fraction of answer positions with the same argmax; -1: not measured
};

struct Interval {
  double lo = 0, hi = 0;
};
// 95% Wilson score interval for k successes out of n.
Interval wilson_interval(int64_t k, int64_t n, double z = 1.959964);

struct CellResult {
  std::string family;
  int64_t length = 0;
  int64_t n = 0;
  int64_t correct = 0;
  double accuracy() const { return n ? static_cast<double>(correct) / static_cast<double>(n) : 0; }
  Interval ci;
  int64_t kl_n = 0;
  double kl_mean = 0;
  double top1_mean = 0;
  double prefill_tok_s = 0;
  double decode_tok_s = 0;
};

struct EvalReport {
  std::string label;
  std::string config;  // describe_generate_options
  std::vector<ExampleResult> examples;
  std::vector<CellResult> cells;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  uint64_t peak_kv_bytes = 0;
};

using EvalProgress = std::function<void(const std::string& cell, int done, int total)>;

// `reference` may be null (then no KL / top-1). The model's tokenizer must cover the task alphabet.
Result<EvalReport> run_eval(Model& model, const Tokenizer& tok, Backend& backend, const EvalSuite& suite,
                            const EvalConfig& config, const EvalConfig* reference,
                            const EvalProgress& progress = nullptr);

// Teacher-forced next-token distributions for `tokens` under `gen`: the first `n_context` tokens
// are prefilled, then the rest are fed one decode step at a time (so anything that acts between
// decode steps acts here too). Returns logits [tokens.size() - n_context][n_vocab] predicting
// tokens[n_context..] (row i predicts tokens[n_context + i]).
Result<std::vector<float>> teacher_forced_logits(Model& model, Backend& backend, const std::vector<TokenId>& tokens,
                                                 size_t n_context, const GenerateOptions& gen);

// Perplexity over a token stream in windows of n_ctx, as llama-perplexity computes it: each
// window starts with `bos` (when >= 0) in place of its first token, and the logits of positions
// n_ctx/2 .. n_ctx-2 score the next token (n_ctx - 1 - n_ctx/2 tokens per window). Pass the
// stream as the tokenizer encodes the whole text with BOS, as llama-perplexity does.
struct PerplexityResult {
  double ppl = 0;
  double ppl_stderr = 0;  // of the mean NLL, carried to perplexity
  int64_t scored_tokens = 0;
  int64_t windows = 0;
  std::vector<float> nll;  // each scored position's negative log-likelihood, window after window
};
Result<PerplexityResult> perplexity(Model& model, Backend& backend, const std::vector<TokenId>& tokens, int32_t n_ctx,
                                    DType kv_dtype, TokenId bos);

// Renders reports as a markdown table and as JSON; a sweep as an SVG line chart of accuracy
// against the swept value (one line per family, averaged over lengths, 95% interval bars).
std::string report_table(const std::vector<EvalReport>& reports);
std::string report_json(const std::vector<EvalReport>& reports);
std::string sweep_svg(const std::string& name, const std::vector<std::string>& values,
                      const std::vector<EvalReport>& reports);

}  // namespace frugal::eval
