// MemSpec: several drafts of different size and quality (draft models, n-gram lookup), a memory
// budget that does not hold all of them, and a runtime that decides per sequence which draft to
// use and, separately, which drafts to keep loaded.
//
// Selecting the draft that predicts best is not enough where memory is short: a draft that is not
// resident must be loaded first (its file read, its KV cache allocated), and a selector that loads
// on demand pays that time whenever its choice moves. MemSpec splits the two decisions:
// - a predictor estimates each draft's acceptance for a sequence from its prompt and generation
//   context (whether its last tokens recur earlier, how often the n-gram lookup has been right on
//   it, what each draft achieved on it so far), one small least-squares fit per draft learned
//   online from every verify pass; and each draft's step time (draft + verify of k tokens, a + b k
//   milliseconds) measured the same way, as is a plain step's;
// - the selector picks, per sequence and step, the option of highest predicted rate, (1 + expected
//   kept tokens) / step time, among the resident drafts and plain decoding (not drafting at all is
//   the right answer where no draft pays for itself);
// - a residency scheduler, every few steps, picks the set of drafts that fits the budget and
//   maximises the predicted rate over the running sequences, and loads a new set only when the
//   predicted time saved over the next steps outweighs the measured load time (proactive, not
//   reactive).
// The baseline it is measured against is a bandit (UCB1 over the drafts and plain decoding, reward
// = the observed rate of a step) that loads whatever it picks on demand, evicting the least
// recently used draft to fit.
//
// Acceptance is read back from the sequence itself: the tokens that follow a proposal on the next
// call are the kept draft tokens and the target's own, so the drafter needs no notice from the
// engine (a new sequence in a slot is recognised by its tokens).
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "frugal/decode/speculative/drafter.h"

namespace frugal::speculative {

// Features of a sequence the predictor reads (before each draft).
struct DraftFeatures {
  double lookup = 0;      // 1 when the sequence's last tokens recur earlier (n-gram has a proposal)
  double lookup_hit = 0;  // running rate at which the n-gram lookup's next token was the one emitted
};

// Step time ~ a + b k (milliseconds for a step drafting k tokens per sequence), least squares with
// forgetting (the machine's load drifts); before two distinct k are seen, b is the prior slope.
class StepTimeFit {
 public:
  void add(double k, double ms);
  bool known() const { return n_ >= 2; }
  double predict(double k, double prior_slope) const;

 private:
  static constexpr double kForget = 0.97;
  double s0_ = 0, sk_ = 0, skk_ = 0, sy_ = 0, sky_ = 0;
  int64_t n_ = 0;
};

// accepted fraction ~ w . [1, lookup, lookup_hit], ridge least squares with exponential forgetting
// (a sequence's predictability drifts), solved in closed form (3 x 3) when asked.
class AcceptanceFit {
 public:
  explicit AcceptanceFit(double prior);
  void add(const DraftFeatures& f, double accepted_fraction);
  double predict(const DraftFeatures& f) const;  // clamped to [0, 1]
  int64_t n() const { return n_; }

 private:
  static constexpr double kForget = 0.995;  // weight of the past per observation
  static constexpr double kRidge = 2.0;     // pseudo-observations pulling w toward the prior
  double a_[3][3] = {};
  double b_[3] = {};
  double prior_;
  int64_t n_ = 0;
};

class MemSpecDrafter final : public Drafter {
 public:
  // o.draft_pool: "ngram" or model paths; o.draft_memory: the residency budget in bytes for the
  // draft models' weights and KV caches (0: the largest draft's own footprint). Each model is
  // loaded once here to check its vocabulary and measure its footprint and load time; a draft
  // whose footprint alone exceeds the budget is refused with the numbers.
  static Result<std::unique_ptr<MemSpecDrafter>> create(const SpeculativeOptions& o, const DrafterContext& ctx);
  ~MemSpecDrafter() override;

  Method method() const override { return Method::kMemSpec; }
  Status propose(std::span<const DraftSequence> seqs, std::span<Draft> out) override;
  // The cheapest model draft's cost: the engine's draft length starts from it, and every draft's
  // acceptance is read back per pass anyway.
  double cost_ratio() const override;
  std::string pool_report() const override;

  struct MemberStats {
    std::string name;
    uint64_t bytes = 0;  // weights + KV cache when resident (0: n-gram)
    bool resident = false;
    int64_t passes = 0, drafted = 0, accepted = 0;
    int64_t loads = 0;
    double load_ms = 0;
  };
  std::vector<MemberStats> stats() const;
  uint64_t budget() const { return budget_; }

 private:
  struct Member;
  struct SlotState;
  MemSpecDrafter(const SpeculativeOptions& o, const DrafterContext& ctx);

  Status load(Member& m);
  void unload(Member& m);
  uint64_t resident_bytes() const;
  // Predicted tokens per millisecond of members_[member] on sequence s drafting k tokens; member ==
  // members_.size() is plain decoding.
  double predicted_rate(size_t member, const SlotState& s, int32_t k) const;
  double plain_ms() const;
  // Reads back what happened to the slot's previous proposal (its kept tokens, or -1 when there
  // was none); resets the state for a new sequence.
  int64_t observe(SlotState& s, std::span<const TokenId> tokens);
  Status reschedule(std::span<const DraftSequence> seqs);           // kPredict
  Status ensure_resident(size_t member);                            // kBandit
  size_t bandit_pick() const;  // members_.size(): plain

  SpeculativeOptions opts_;
  DrafterContext ctx_;
  DraftSelector selector_;
  uint64_t budget_ = 0;
  std::vector<std::unique_ptr<Member>> members_;
  std::vector<SlotState> slots_;
  int64_t calls_ = 0;
  int64_t bandit_pulls_ = 0;
  double step_ms_ = 0;  // running time between calls: one engine step
  std::chrono::steady_clock::time_point last_call_{};
  // The previous call: which option every sequence in it took (members_.size(): plain; -1: mixed),
  // its draft length, and how many sequences it had (a step is attributed only when all of them
  // are read back).
  int64_t last_option_ = -1;
  double last_k_ = 0;
  size_t last_n_ = 0;
  StepTimeFit plain_time_;
  double plain_reward_sum_ = 0;  // the bandit's plain arm
  int64_t plain_pulls_ = 0;
  double best_rate_ = 0;         // the highest rate observed: the bandit's rewards are over it
  std::mt19937_64 rng_;
};

}  // namespace frugal::speculative
