#include "frugal/decode/speculative/memspec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "frugal/backend/backend.h"
#include "frugal/decode/speculative/draft_model.h"
#include "frugal/decode/speculative/ngram.h"
#include "frugal/kv/kv_cache.h"
#include "frugal/model/model.h"

namespace frugal::speculative {

namespace {

constexpr size_t kMaxPool = 8;           // subsets of the model drafts are enumerated (2^8)
constexpr int64_t kRescheduleEvery = 16;  // calls between residency decisions
// Steps a residency decision is expected to hold: the gain it predicts is counted over this many
// steps against the time its loads take.
constexpr double kHorizonSteps = 64;
constexpr double kExplore = 0.03;       // share of choices that try another resident option
constexpr int64_t kPlainProbe = 4;      // first calls decoded plainly: a plain step's time is measured
constexpr double kPriorAccepted = 0.5;  // accepted fraction assumed for a draft before any pass
// Draft tokens of a sequence's own record with a draft that weigh as much as the global fit.
constexpr double kSequenceWeight = 4.0;
constexpr double kDecay = 0.8;  // per pass, of a sequence's own record (and its n-gram hit rate)

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* draft_selector_name(DraftSelector s) { return s == DraftSelector::kBandit ? "bandit" : "predict"; }

Result<DraftSelector> parse_draft_selector(const std::string& name) {
  if (name == "predict") return DraftSelector::kPredict;
  if (name == "bandit") return DraftSelector::kBandit;
  return error(ErrorCode::kInvalidArgument, "draft selector '{}' is not predict or bandit", name);
}

AcceptanceFit::AcceptanceFit(double prior) : prior_(prior) {}

void AcceptanceFit::add(const DraftFeatures& f, double accepted_fraction) {
  const double x[3] = {1.0, f.lookup, f.lookup_hit};
  for (int i = 0; i < 3; ++i) {
    b_[i] = kForget * b_[i] + accepted_fraction * x[i];
    for (int j = 0; j < 3; ++j) a_[i][j] = kForget * a_[i][j] + x[i] * x[j];
  }
  ++n_;
}

double AcceptanceFit::predict(const DraftFeatures& f) const {
  // (A + r I) w = b + r w0 with w0 = (prior, 0, 0): the ridge pulls toward "the prior everywhere".
  double m[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[i][j] = a_[i][j] + (i == j ? kRidge : 0.0);
    m[i][3] = b_[i] + (i == 0 ? kRidge * prior_ : 0.0);
  }
  // Gaussian elimination; the matrix is symmetric positive definite (ridge), so no pivoting.
  for (int c = 0; c < 3; ++c) {
    for (int r = c + 1; r < 3; ++r) {
      const double f2 = m[r][c] / m[c][c];
      for (int k = c; k < 4; ++k) m[r][k] -= f2 * m[c][k];
    }
  }
  double w[3];
  for (int r = 2; r >= 0; --r) {
    double v = m[r][3];
    for (int k = r + 1; k < 3; ++k) v -= m[r][k] * w[k];
    w[r] = v / m[r][r];
  }
  return std::clamp(w[0] + w[1] * f.lookup + w[2] * f.lookup_hit, 0.0, 1.0);
}

void StepTimeFit::add(double k, double ms) {
  s0_ = kForget * s0_ + 1.0;
  sk_ = kForget * sk_ + k;
  skk_ = kForget * skk_ + k * k;
  sy_ = kForget * sy_ + ms;
  sky_ = kForget * sky_ + k * ms;
  ++n_;
}

double StepTimeFit::predict(double k, double prior_slope) const {
  if (s0_ == 0) return 0;
  const double mean_k = sk_ / s0_, mean_y = sy_ / s0_;
  const double var_k = skk_ / s0_ - mean_k * mean_k;
  // One draft length seen so far (or nearly): its mean time, the prior slope for the others.
  const double slope = var_k > 0.25 ? (sky_ / s0_ - mean_k * mean_y) / var_k : prior_slope;
  return std::max(1e-3, mean_y + slope * (k - mean_k));
}

struct MemSpecDrafter::Member {
  explicit Member(double prior) : fit(prior) {}
  bool is_model() const { return !path.empty(); }
  bool resident() const { return !is_model() || drafter != nullptr; }

  std::string name;
  std::string path;            // empty: the n-gram lookup
  uint64_t bytes = 0;          // weights + KV cache when resident
  double cost = 0;             // a draft token's cost relative to a target pass
  double probe_load_ms = 0;    // the load measured when the pool was made
  std::unique_ptr<Model> model;
  std::unique_ptr<Drafter> drafter;
  AcceptanceFit fit;
  StepTimeFit step_time;       // draft + verify of a step that drafted with this member
  int64_t passes = 0, drafted = 0, accepted = 0, loads = 0;
  double load_ms = 0;
  double reward_sum = 0;       // bandit: observed speed, normalised to (0, 1]
  int64_t pulls = 0;
  int64_t last_used = 0;       // call index (least recently used is evicted first)
};

struct MemSpecDrafter::SlotState {
  size_t base = 0;             // the sequence's length when its last draft was proposed
  TokenId last = -1;           // its last token then
  int member = -1;             // who proposed it
  std::vector<TokenId> proposed;
  DraftFeatures features;      // at that proposal
  TokenId lookup_guess = -1;   // the n-gram lookup's next token at the last call (-1: none)
  double hit_num = 0, hit_den = 0;
  std::vector<double> kept, seen;  // per member: decayed kept / drafted tokens on this sequence
  std::vector<uint8_t> synced;     // per member: it has drafted for this sequence (its KV caught up)
};

MemSpecDrafter::MemSpecDrafter(const SpeculativeOptions& o, const DrafterContext& ctx)
    : opts_(o), ctx_(ctx), selector_(o.selector), rng_(o.search_seed) {}

MemSpecDrafter::~MemSpecDrafter() = default;

Result<std::unique_ptr<MemSpecDrafter>> MemSpecDrafter::create(const SpeculativeOptions& o,
                                                               const DrafterContext& ctx) {
  if (ctx.target == nullptr || ctx.backend == nullptr) {
    return error(ErrorCode::kInvalidArgument, "memspec: no target model or backend given");
  }
  if (o.draft_pool.size() < 2 || o.draft_pool.size() > kMaxPool) {
    return error(ErrorCode::kInvalidArgument,
                 "memspec: --spec-drafts lists {} drafts; it needs 2 to {} (\"ngram\" or draft model files)",
                 o.draft_pool.size(), kMaxPool);
  }
  auto d = std::unique_ptr<MemSpecDrafter>(new MemSpecDrafter(o, ctx));
  d->slots_.resize(static_cast<size_t>(std::max(ctx.n_slots, 1)));
  const uint64_t target_bytes = ctx.target->weights().bytes;
  for (const std::string& entry : o.draft_pool) {
    for (const auto& m : d->members_) {
      if ((entry == "ngram" && !m->is_model()) || (entry != "ngram" && m->path == entry)) {
        return error(ErrorCode::kInvalidArgument, "memspec: --spec-drafts lists '{}' twice", entry);
      }
    }
    auto m = std::make_unique<Member>(kPriorAccepted);
    if (entry == "ngram") {
      m->name = "ngram";
    } else {
      m->path = entry;
      m->name = std::filesystem::path(entry).filename().string();
      // Loaded once now: the vocabulary is checked and the footprint and load time measured.
      FRUGAL_RETURN_IF_ERROR(d->load(*m).with_context("memspec"));
      m->probe_load_ms = m->load_ms;
      m->loads = 0;
      m->load_ms = 0;
      const KvCacheOptions ko = m->model->kv_options(ctx.n_slots, ctx.capacity, ctx.kv_dtype);
      m->bytes = m->model->weights().bytes + kv_reserved_bytes(ko);
      m->cost = target_bytes > 0 ? static_cast<double>(m->model->weights().bytes) / target_bytes : 1.0;
    }
    d->members_.push_back(std::move(m));
  }
  for (const auto& m : d->members_) d->budget_ = std::max(d->budget_, m->bytes);
  if (o.draft_memory > 0) d->budget_ = o.draft_memory;
  for (const auto& m : d->members_) {
    if (m->bytes > d->budget_) {
      return error(ErrorCode::kOverBudget,
                   "memspec: draft {} needs {} bytes (weights + KV cache for {} sequences x {} tokens), more than the "
                   "draft memory budget of {} bytes",
                   m->name, m->bytes, ctx.n_slots, ctx.capacity, d->budget_);
    }
  }
  // What stays loaded until the first residency decision: the drafts of best prior speed (equal
  // acceptance assumed, so the cheapest first) that fit.
  std::vector<size_t> order;
  for (size_t i = 0; i < d->members_.size(); ++i) {
    if (d->members_[i]->is_model()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return d->members_[a]->cost < d->members_[b]->cost; });
  uint64_t used = 0;
  for (size_t i : order) {
    Member& m = *d->members_[i];
    if (used + m.bytes <= d->budget_) {
      used += m.bytes;
    } else {
      d->unload(m);
    }
  }
  for (auto& s : d->slots_) {
    s.kept.assign(d->members_.size(), 0.0);
    s.seen.assign(d->members_.size(), 0.0);
    s.synced.assign(d->members_.size(), 0);
  }
  return d;
}

Status MemSpecDrafter::load(Member& m) {
  const auto t0 = std::chrono::steady_clock::now();
  ModelLoadOptions lo;
  lo.cpu_layouts = std::string(ctx_.backend->name()) == "cpu";
  auto model = Model::load(m.path, lo);
  if (!model.ok()) return model.status().with_context(m.path);
  // The budget is checked by the pool (all resident drafts together), not per draft.
  auto drafter = DraftModelDrafter::create(**model, std::numeric_limits<uint64_t>::max(), ctx_);
  if (!drafter.ok()) return drafter.status().with_context(m.path);
  m.model = std::move(model).value();
  m.drafter = std::move(drafter).value();
  m.loads += 1;
  m.load_ms += ms_since(t0);
  return ok_status();
}

void MemSpecDrafter::unload(Member& m) {
  m.drafter.reset();
  m.model.reset();
}

uint64_t MemSpecDrafter::resident_bytes() const {
  uint64_t b = 0;
  for (const auto& m : members_) {
    if (m->is_model() && m->resident()) b += m->bytes;
  }
  return b;
}

double MemSpecDrafter::cost_ratio() const {
  double c = 0;
  for (const auto& m : members_) {
    if (m->is_model() && (c == 0 || m->cost < c)) c = m->cost;
  }
  return c;
}

double MemSpecDrafter::plain_ms() const {
  if (plain_time_.known()) return plain_time_.predict(0, 0);
  return step_ms_ > 0 ? step_ms_ : 1.0;
}

double MemSpecDrafter::predicted_rate(size_t member, const SlotState& s, int32_t k) const {
  const double plain = plain_ms();
  if (member == members_.size()) return 1.0 / plain;
  const Member& m = *members_[member];
  // The n-gram lookup proposes nothing when the last tokens do not recur: a plain step.
  if (!m.is_model() && s.features.lookup == 0) return 1.0 / plain;
  double p = m.fit.predict(s.features);
  // The sequence's own record with this draft outweighs the global fit as it grows.
  if (member < s.seen.size() && s.seen[member] > 0) {
    p = (p * kSequenceWeight + s.kept[member]) / (kSequenceWeight + s.seen[member]);
  }
  // Until its steps are measured, a draft token costs its share of the target's bytes of a plain
  // step, and a verify pass costs a plain step.
  const double prior_slope = plain * m.cost;
  const double ms = m.step_time.known() ? m.step_time.predict(k, prior_slope) : plain + k * prior_slope;
  return (1.0 + p * k) / ms;
}

int64_t MemSpecDrafter::observe(SlotState& s, std::span<const TokenId> tokens) {
  const bool continues = s.base > 0 && tokens.size() > s.base && tokens[s.base - 1] == s.last;
  if (!continues) {
    // A new sequence in this slot (or the first call): nothing to read back.
    s.base = 0;
    s.member = -1;
    s.proposed.clear();
    s.lookup_guess = -1;
    s.hit_num = s.hit_den = 0;
    std::fill(s.kept.begin(), s.kept.end(), 0.0);
    std::fill(s.seen.begin(), s.seen.end(), 0.0);
    std::fill(s.synced.begin(), s.synced.end(), 0);
    return -1;
  }
  if (s.lookup_guess >= 0) {
    s.hit_num = kDecay * s.hit_num + (tokens[s.base] == s.lookup_guess ? 1.0 : 0.0);
    s.hit_den = kDecay * s.hit_den + 1.0;
  }
  int64_t result = 0;
  if (s.member >= 0 && !s.proposed.empty()) {
    Member& m = *members_[static_cast<size_t>(s.member)];
    // The tokens after the proposal point are the kept draft tokens, then the target's own.
    size_t kept = 0;
    const size_t limit = std::min(s.proposed.size(), tokens.size() - s.base);
    while (kept < limit && tokens[s.base + kept] == s.proposed[kept]) ++kept;
    const double drafted = static_cast<double>(s.proposed.size());
    m.fit.add(s.features, static_cast<double>(kept) / drafted);
    m.passes += 1;
    m.drafted += static_cast<int64_t>(s.proposed.size());
    m.accepted += static_cast<int64_t>(kept);
    const size_t j = static_cast<size_t>(s.member);
    s.kept[j] = kDecay * s.kept[j] + static_cast<double>(kept);
    s.seen[j] = kDecay * s.seen[j] + drafted;
    result = static_cast<int64_t>(kept);
  }
  s.member = -1;
  s.proposed.clear();
  return result;
}

Status MemSpecDrafter::reschedule(std::span<const DraftSequence> seqs) {
  std::vector<size_t> models;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->is_model()) models.push_back(i);
  }
  // Value of a resident set: the sum over running sequences of the best predicted speed it offers.
  auto value = [&](uint32_t mask) {
    double v = 0;
    for (const DraftSequence& q : seqs) {
      const SlotState& s = slots_[static_cast<size_t>(q.slot)];
      double best = predicted_rate(members_.size(), s, q.max_tokens);  // a plain step
      for (size_t i = 0; i < members_.size(); ++i) {
        const Member& m = *members_[i];
        if (m.is_model()) {
          const size_t bit = static_cast<size_t>(std::find(models.begin(), models.end(), i) - models.begin());
          if (!(mask >> bit & 1u)) continue;
        }
        best = std::max(best, predicted_rate(i, s, q.max_tokens));
      }
      v += best;
    }
    return v;
  };
  uint32_t current = 0;
  for (size_t b = 0; b < models.size(); ++b) {
    if (members_[models[b]]->resident()) current |= 1u << b;
  }
  uint32_t best_mask = current;
  double best_value = value(current);
  uint64_t best_bytes = resident_bytes();
  for (uint32_t mask = 0; mask < (1u << models.size()); ++mask) {
    uint64_t bytes = 0;
    for (size_t b = 0; b < models.size(); ++b) {
      if (mask >> b & 1u) bytes += members_[models[b]]->bytes;
    }
    if (bytes > budget_) continue;
    const double v = value(mask);
    // Strictly better, or as good for fewer bytes.
    if (v > best_value + 1e-9 || (std::abs(v - best_value) <= 1e-9 && bytes < best_bytes)) {
      best_mask = mask;
      best_value = v;
      best_bytes = bytes;
    }
  }
  if (best_mask == current) return ok_status();
  // Load only when the time the new set saves over the horizon exceeds what its loads cost.
  const double now_value = std::max(value(current), 1e-9);
  double load_ms = 0;
  for (size_t b = 0; b < models.size(); ++b) {
    const Member& m = *members_[models[b]];
    if ((best_mask >> b & 1u) && !(current >> b & 1u)) load_ms += m.loads > 0 ? m.load_ms / m.loads : m.probe_load_ms;
  }
  const double saved_ms = kHorizonSteps * plain_ms() * (1.0 - now_value / best_value);
  if (load_ms > 0 && saved_ms <= load_ms) return ok_status();
  for (size_t b = 0; b < models.size(); ++b) {
    if (!(best_mask >> b & 1u) && (current >> b & 1u)) unload(*members_[models[b]]);
  }
  for (size_t b = 0; b < models.size(); ++b) {
    if ((best_mask >> b & 1u) && !(current >> b & 1u)) FRUGAL_RETURN_IF_ERROR(load(*members_[models[b]]));
  }
  return ok_status();
}

size_t MemSpecDrafter::bandit_pick() const {
  // Every arm once (plain first), then UCB1.
  if (plain_pulls_ == 0) return members_.size();
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->pulls == 0) return i;
  }
  const double log_n = std::log(static_cast<double>(std::max<int64_t>(bandit_pulls_, 1)));
  size_t best = members_.size();
  double best_score = plain_reward_sum_ / plain_pulls_ + std::sqrt(2.0 * log_n / plain_pulls_);
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = *members_[i];
    const double score = m.reward_sum / m.pulls + std::sqrt(2.0 * log_n / m.pulls);
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  return best;
}

Status MemSpecDrafter::ensure_resident(size_t member) {
  if (member == members_.size()) return ok_status();  // plain decoding needs nothing loaded
  Member& m = *members_[member];
  if (m.resident()) return ok_status();
  // Evict the least recently used drafts until it fits.
  while (resident_bytes() + m.bytes > budget_) {
    Member* lru = nullptr;
    for (const auto& other : members_) {
      if (other->is_model() && other->resident() && (lru == nullptr || other->last_used < lru->last_used)) {
        lru = other.get();
      }
    }
    if (lru == nullptr) break;
    unload(*lru);
  }
  return load(m);
}

Status MemSpecDrafter::propose(std::span<const DraftSequence> seqs, std::span<Draft> out) {
  if (out.size() != seqs.size()) {
    return error(ErrorCode::kInvalidArgument, "memspec: {} outputs for {} sequences", out.size(), seqs.size());
  }
  const auto now = std::chrono::steady_clock::now();
  const double interval = calls_ > 0 ? std::chrono::duration<double, std::milli>(now - last_call_).count() : 0;
  if (calls_ > 0) step_ms_ = step_ms_ == 0 ? interval : 0.9 * step_ms_ + 0.1 * interval;
  last_call_ = now;
  calls_ += 1;
  // Read back the previous step: each sequence's kept tokens, then the step's time and rate for
  // the option it took, when every sequence of it continues here and all took the same option.
  size_t continuing = 0;
  int64_t emitted = 0;
  for (const DraftSequence& q : seqs) {
    if (q.slot < 0 || static_cast<size_t>(q.slot) >= slots_.size()) {
      return error(ErrorCode::kInvalidArgument, "memspec: sequence slot {} of {}", q.slot, slots_.size());
    }
    SlotState& s = slots_[static_cast<size_t>(q.slot)];
    const int64_t kept = observe(s, q.tokens);
    if (kept >= 0) {
      ++continuing;
      emitted += kept + 1;
    }
    const std::vector<TokenId> guess = lookup_continuation(q.tokens, opts_.ngram_max, 1);
    s.lookup_guess = guess.empty() ? -1 : guess.front();
    s.features.lookup = guess.empty() ? 0.0 : 1.0;
    s.features.lookup_hit = s.hit_den > 0 ? s.hit_num / s.hit_den : 0.5;
  }
  if (last_option_ >= 0 && last_n_ > 0 && continuing == last_n_ && interval > 0) {
    const double rate = static_cast<double>(emitted) / interval;
    best_rate_ = std::max(best_rate_, rate);
    const double reward = rate / best_rate_;
    if (static_cast<size_t>(last_option_) == members_.size()) {
      plain_time_.add(0, interval);
      plain_reward_sum_ += reward;
      plain_pulls_ += 1;
    } else {
      Member& m = *members_[static_cast<size_t>(last_option_)];
      m.step_time.add(last_k_, interval);
      m.reward_sum += reward;
      m.pulls += 1;
    }
    bandit_pulls_ += 1;
  }
  const size_t plain = members_.size();
  size_t bandit_choice = plain;
  if (selector_ == DraftSelector::kPredict) {
    if (calls_ % kRescheduleEvery == 0) FRUGAL_RETURN_IF_ERROR(reschedule(seqs));
  } else {
    bandit_choice = bandit_pick();
    FRUGAL_RETURN_IF_ERROR(ensure_resident(bandit_choice));
  }
  // Each sequence's option, then one call per draft with its sequences.
  std::vector<size_t> choice(seqs.size(), plain);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SlotState& s = slots_[static_cast<size_t>(seqs[i].slot)];
    if (selector_ == DraftSelector::kBandit) {
      choice[i] = bandit_choice;
      continue;
    }
    if (calls_ <= kPlainProbe) continue;  // plain: its step time is what every option is weighed against
    std::vector<size_t> options = {plain};
    size_t best = plain;
    double best_rate = predicted_rate(plain, s, seqs[i].max_tokens);
    for (size_t j = 0; j < members_.size(); ++j) {
      if (!members_[j]->resident()) continue;
      options.push_back(j);
      const double v = predicted_rate(j, s, seqs[i].max_tokens);
      if (v > best_rate) {
        best_rate = v;
        best = j;
      }
    }
    // Now and then another resident option, so each fit keeps seeing sequences like this one.
    if (unit(rng_) < kExplore) best = options[static_cast<size_t>(rng_() % options.size())];
    choice[i] = best;
  }
  std::vector<size_t> used;
  double drafted_total = 0;
  // A model draft's first step on a sequence also runs its prompt through the draft: that step's
  // time is not a draft step's, so it is not measured.
  bool catch_up = false;
  for (size_t j = 0; j < members_.size(); ++j) {
    std::vector<DraftSequence> sub;
    std::vector<size_t> where;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (choice[i] != j) continue;
      sub.push_back(seqs[i]);
      where.push_back(i);
    }
    if (sub.empty()) continue;
    Member& m = *members_[j];
    std::vector<Draft> sub_out(sub.size());
    if (m.is_model()) {
      FRUGAL_RETURN_IF_ERROR(m.drafter->propose(sub, sub_out));
    } else {
      for (size_t i = 0; i < sub.size(); ++i) {
        sub_out[i].q.clear();
        sub_out[i].tokens = lookup_continuation(sub[i].tokens, opts_.ngram_max, sub[i].max_tokens);
      }
    }
    m.last_used = calls_;
    bool any = false;
    for (size_t i = 0; i < sub.size(); ++i) {
      SlotState& s = slots_[static_cast<size_t>(sub[i].slot)];
      if (m.is_model() && !s.synced[j]) catch_up = true;
      s.synced[j] = 1;
      s.base = sub[i].tokens.size();
      s.last = sub[i].tokens.back();
      s.member = sub_out[i].tokens.empty() ? -1 : static_cast<int>(j);
      s.proposed = sub_out[i].tokens;
      drafted_total += static_cast<double>(sub_out[i].tokens.size());
      any = any || !sub_out[i].tokens.empty();
      out[where[i]] = std::move(sub_out[i]);
    }
    if (any) used.push_back(j);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (choice[i] != plain) continue;
    SlotState& s = slots_[static_cast<size_t>(seqs[i].slot)];
    s.base = seqs[i].tokens.size();
    s.last = seqs[i].tokens.back();
    s.member = -1;
    s.proposed.clear();
    out[i].tokens.clear();
    out[i].q.clear();
  }
  // What this step will be attributed to when the next call measures it.
  last_option_ = used.empty() ? static_cast<int64_t>(plain) : used.size() == 1 ? static_cast<int64_t>(used[0]) : -1;
  if (catch_up) last_option_ = -1;
  last_k_ = drafted_total / static_cast<double>(std::max<size_t>(seqs.size(), 1));
  last_n_ = seqs.size();
  return ok_status();
}

std::vector<MemSpecDrafter::MemberStats> MemSpecDrafter::stats() const {
  std::vector<MemberStats> out;
  for (const auto& m : members_) {
    out.push_back({m->name, m->bytes, m->resident(), m->passes, m->drafted, m->accepted, m->loads, m->load_ms});
  }
  return out;
}

std::string MemSpecDrafter::pool_report() const {
  std::string r = fmt::format("{} selector, {} of {} bytes resident; plain step {:.2f} ms", draft_selector_name(selector_),
                              resident_bytes(), budget_, plain_ms());
  for (const auto& m : members_) {
    r += fmt::format("; {}{}: {} passes, {}/{} kept", m->name, m->resident() ? " (resident)" : "", m->passes,
                     m->accepted, m->drafted);
    if (m->is_model()) r += fmt::format(", {} loads {:.1f} ms", m->loads, m->load_ms);
  }
  return r;
}

}  // namespace frugal::speculative
