// Token sampling from one logits vector: repetition penalties, then top-k, top-p, min-p,
// temperature and a seeded draw, in llama.cpp's default order and with its definitions, or greedy
// argmax when the temperature is zero. Knows nothing about models; the engine owns one Sampler per
// request so that a fixed seed always reproduces the same tokens.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "frugal/core/greedy_token.h"
#include "frugal/core/status.h"
#include "frugal/core/token_id.h"

namespace frugal {

// A seed value that asks the sampler to take its seed from the clock (Sampler::seed() reports
// the one it took, so a response can echo it and a run can be replayed).
inline constexpr uint64_t kSeedFromTime = ~uint64_t{0};

// Per-request sampling options; defaults are llama.cpp's.
struct SamplingParams {
  float temperature = 0.8f;     // <= 0: greedy (argmax, ties to the lowest id); must be >= 0
  int32_t top_k = 40;           // 0: off; keep the k most likely tokens
  float top_p = 0.95f;          // in (0, 1]; 1: off; smallest prefix with probability >= top_p
  float min_p = 0.05f;          // in [0, 1]; 0: off; keep p >= min_p * p_max
  float repeat_penalty = 1.0f;  // > 0; 1: off; divides positive / multiplies negative logits
  int32_t repeat_last_n = 64;   // window of history the penalties see; 0: off; -1: all of it
  float presence_penalty = 0.0f;   // subtracted once from every token in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  uint64_t seed = 0;            // kSeedFromTime: draw one from the clock
};

// kInvalidArgument naming the field (e.g. "sampling: top_p = 1.5 is outside (0, 1]").
Status validate(const SamplingParams& params);

// True when this request's token is greedy_token (core/greedy_token.h) of the raw logits
// (temperature 0, no penalties):
// the engine may then ask the backend for the token instead of the logits.
bool picks_greedy_token(const SamplingParams& params);

struct TokenLogprob {
  TokenId id = -1;
  float logprob = 0.0f;  // natural log
};

// Numerically stable softmax / log-softmax of a whole vector (NaN counts as -inf).
std::vector<float> softmax(std::span<const float> logits);
std::vector<float> log_softmax(std::span<const float> logits);
// The k most likely tokens with their log-probabilities under softmax(logits), most likely first,
// ties by lower id; k is clamped to [0, logits.size()].
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k);
// log softmax(logits)[id]; -inf for an id outside the vector.
float token_logprob(std::span<const float> logits, TokenId id);

class Sampler {
 public:
  // Validates the parameters (and n_vocab > 0) first.
  static Result<Sampler> create(const SamplingParams& params, int32_t n_vocab);
  // Trusts the caller to have validated `params`; buffers for n_vocab tokens are allocated here
  // once, so sampling itself does not allocate.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  // Picks the next token from logits[n_vocab]. `history` (prompt + tokens generated so far) feeds
  // the penalties; ids outside [0, n_vocab) in it are ignored. Deterministic for a given seed and
  // sequence of calls.
  TokenId sample(const float* logits, std::span<const TokenId> history);
  // The same, with the history collected through accept().
  TokenId sample(const float* logits) { return sample(logits, history_); }

  // The distribution sample() draws from, written to probs[n_vocab]: penalties, top-k, top-p and
  // min-p as sample() applies them, then the temperature softmax over the surviving support (zero
  // everywhere else); one-hot at the argmax when greedy. Draws nothing, so the generator's stream
  // is untouched. Speculative decoding applies its acceptance rule to these (decode/speculative).
  void distribution(const float* logits, std::span<const TokenId> history, float* probs);
  // A uniform draw in [0, 1) from this sampler's seeded generator (53 random bits).
  double uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  // Records a token (prompt or generated) in the sampler's own history; older tokens than the
  // penalty window are dropped in batches (nothing is kept when repeat_last_n is 0, all when -1).
  void accept(TokenId id);
  // Forgets the accepted history and restarts the generator from the seed.
  void reset();

  // The tokens the last sample() could have drawn, with their logits after penalties and before
  // temperature: the truncated support (most likely first when top-k or top-p sorted it), or the
  // single argmax when greedy. Valid until the next sample().
  struct Candidate {
    float logit;
    TokenId id;
  };
  std::span<const Candidate> support() const { return {candidates_.data(), n_cand_}; }

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }
  uint64_t seed() const { return seed_; }  // the effective seed (resolved from the clock if asked)
  std::span<const TokenId> history() const { return history_; }

 private:
  void load_logits(const float* logits, std::span<const TokenId> history);
  // What sample() and distribution() share: loads the logits and narrows the support (the argmax
  // when greedy, returned; else top-k, top-p, min-p in that order, returning -1).
  TokenId prepare_support(const float* logits, std::span<const TokenId> history);
  TokenId argmax() const;
  void apply_top_k(int32_t k);
  void apply_top_p(float p);
  void apply_top_p_buckets(float p);
  void apply_min_p(float p);
  TokenId draw();
  // Makes candidates_[0, n) sorted (logit descending, id ascending) given [0, sorted_) already is.
  void sort_prefix(size_t n);

  SamplingParams params_;
  int32_t n_vocab_ = 0;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;  // its output sequence is fixed by the C++ standard
  std::vector<float> work_;        // [n_vocab] logits after penalties
  std::vector<int32_t> counts_;    // [n_vocab] occurrences in the penalty window; kept all zero
  std::vector<Candidate> candidates_;  // [n_vocab] capacity; the surviving support
  size_t n_cand_ = 0;   // size of the support in candidates_
  size_t sorted_ = 0;   // candidates_[0, sorted_) is sorted and precedes everything after it
  std::vector<Candidate> scratch_;     // [n_vocab] capacity
  std::vector<double> bucket_mass_;    // [kTopPBuckets + 1] for top-p over large supports
  std::vector<TokenId> history_;   // from accept()
};

}  // namespace frugal
