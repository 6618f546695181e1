#include "frugal/decode/sampler.h"

#include "frugal/core/hash.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace frugal {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Top-p over a large unsorted support: bucket the candidates by distance to the maximum logit
// (kTopPBucketsPerLogit buckets per unit, the last one catching everything further than
// kTopPBuckets / kTopPBucketsPerLogit below), find the bucket where the cumulative mass crosses p,
// and sort only that bucket. Smaller supports are simply sorted as far as the walk reaches.
constexpr int kTopPBuckets = 1024;
constexpr float kTopPBucketsPerLogit = 32.0f;
constexpr size_t kTopPBucketMinSupport = 4096;

int top_p_bucket(float max_logit, float logit) {
  const float d = (max_logit - logit) * kTopPBucketsPerLogit;
  return d < static_cast<float>(kTopPBuckets) ? static_cast<int>(d) : kTopPBuckets;
}

// Total order used everywhere candidates are ranked, so sorting is deterministic on every
// standard library: larger logit first, then the lower id.
// A function object rather than a function pointer so that the sorts inline it.
struct Better {
  template <typename C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};
constexpr Better better;

// NaN would break the strict weak ordering of sorts; +inf would make exp(l - max) NaN.
// Written without branches so that the copy over the whole vocabulary vectorizes.
float sanitize(float x) {
  const float clamped = x < std::numeric_limits<float>::max() ? x : std::numeric_limits<float>::max();
  return x == x ? clamped : kNegInf;
}

uint64_t seed_from_clock() {
  const auto wall = std::chrono::system_clock::now().time_since_epoch().count();
  const auto mono = std::chrono::steady_clock::now().time_since_epoch().count();
  uint64_t s = mix64(static_cast<uint64_t>(wall) ^ mix64(static_cast<uint64_t>(mono)));
  return s == kSeedFromTime ? 0 : s;
}

// log(sum(exp(x))) over sanitized values; -inf when every value is -inf.
double log_sum_exp(std::span<const float> logits, float* max_out) {
  float mx = kNegInf;
  for (float x : logits) mx = std::max(mx, sanitize(x));
  *max_out = mx;
  if (mx == kNegInf) return -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(sanitize(x)) - mx);
  return mx + std::log(sum);
}

bool is_finite(float v) { return std::isfinite(v); }

}  // namespace

Status validate(const SamplingParams& p) {
  if (!is_finite(p.temperature) || p.temperature < 0.0f) {
    return error(ErrorCode::kInvalidArgument, "sampling: temperature = {} must be >= 0", p.temperature);
  }
  if (p.top_k < 0) {
    return error(ErrorCode::kInvalidArgument, "sampling: top_k = {} must be >= 0 (0 turns it off)",
                 p.top_k);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return error(ErrorCode::kInvalidArgument, "sampling: top_p = {} is outside (0, 1]", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return error(ErrorCode::kInvalidArgument, "sampling: min_p = {} is outside [0, 1]", p.min_p);
  }
  if (!is_finite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
    return error(ErrorCode::kInvalidArgument, "sampling: repeat_penalty = {} must be > 0 (1 turns it off)",
                 p.repeat_penalty);
  }
  if (p.repeat_last_n < -1) {
    return error(ErrorCode::kInvalidArgument,
                 "sampling: repeat_last_n = {} must be -1 (whole history), 0 (off) or positive",
                 p.repeat_last_n);
  }
  if (!is_finite(p.presence_penalty)) {
    return error(ErrorCode::kInvalidArgument, "sampling: presence_penalty = {} is not finite",
                 p.presence_penalty);
  }
  if (!is_finite(p.frequency_penalty)) {
    return error(ErrorCode::kInvalidArgument, "sampling: frequency_penalty = {} is not finite",
                 p.frequency_penalty);
  }
  return ok_status();
}

std::vector<float> softmax(std::span<const float> logits) {
  std::vector<float> out = log_softmax(logits);
  for (float& x : out) x = std::exp(x);
  return out;
}

std::vector<float> log_softmax(std::span<const float> logits) {
  float mx = 0.0f;
  const double lse = log_sum_exp(logits, &mx);
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = mx == kNegInf ? kNegInf : static_cast<float>(sanitize(logits[i]) - lse);
  }
  return out;
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k) {
  const size_t n = logits.size();
  const size_t kk = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(n)));
  float mx = 0.0f;
  const double lse = log_sum_exp(logits, &mx);
  std::vector<TokenLogprob> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = {static_cast<TokenId>(i), sanitize(logits[i])};
  auto cmp = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
  };
  std::partial_sort(all.begin(), all.begin() + kk, all.end(), cmp);
  all.resize(kk);
  for (auto& t : all) t.logprob = mx == kNegInf ? kNegInf : static_cast<float>(t.logprob - lse);
  return all;
}

float token_logprob(std::span<const float> logits, TokenId id) {
  if (id < 0 || static_cast<size_t>(id) >= logits.size()) return kNegInf;
  float mx = 0.0f;
  const double lse = log_sum_exp(logits, &mx);
  if (mx == kNegInf) return kNegInf;
  return static_cast<float>(sanitize(logits[id]) - lse);
}

Result<Sampler> Sampler::create(const SamplingParams& params, int32_t n_vocab) {
  FRUGAL_RETURN_IF_ERROR(validate(params));
  if (n_vocab <= 0) {
    return error(ErrorCode::kInvalidArgument, "sampling: n_vocab = {} must be positive", n_vocab);
  }
  return Sampler(params, n_vocab);
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params),
      n_vocab_(std::max<int32_t>(n_vocab, 1)),
      seed_(params.seed == kSeedFromTime ? seed_from_clock() : params.seed),
      rng_(seed_),
      work_(n_vocab_),
      counts_(n_vocab_, 0),
      candidates_(n_vocab_),
      scratch_(n_vocab_),
      bucket_mass_(kTopPBuckets + 1) {
  if (params_.repeat_last_n > 0) history_.reserve(2 * static_cast<size_t>(params_.repeat_last_n));
}

void Sampler::accept(TokenId id) {
  const int32_t n = params_.repeat_last_n;
  if (n == 0) return;
  history_.push_back(id);
  // Trim in batches so that accept() stays amortised O(1) without a ring buffer.
  if (n > 0 && history_.size() >= 2 * static_cast<size_t>(n)) {
    history_.erase(history_.begin(), history_.end() - n);
  }
}

void Sampler::reset() {
  history_.clear();
  rng_.seed(seed_);
}

namespace {
bool penalties_off(const SamplingParams& p) {
  return p.repeat_last_n == 0 || (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f);
}
}  // namespace

bool picks_greedy_token(const SamplingParams& params) {
  return !(params.temperature > 0.0f) && penalties_off(params);
}

void Sampler::load_logits(const float* logits, std::span<const TokenId> history) {
  for (int32_t i = 0; i < n_vocab_; ++i) work_[i] = sanitize(logits[i]);

  const SamplingParams& p = params_;
  if (penalties_off(p)) return;
  std::span<const TokenId> window = history;
  if (p.repeat_last_n > 0 && window.size() > static_cast<size_t>(p.repeat_last_n)) {
    window = window.last(static_cast<size_t>(p.repeat_last_n));
  }
  for (TokenId id : window) {
    if (id >= 0 && id < n_vocab_) ++counts_[id];
  }
  // Each distinct token is penalised once, by its count; zeroing the count marks it done and
  // leaves counts_ clean for the next call.
  for (TokenId id : window) {
    if (id < 0 || id >= n_vocab_ || counts_[id] == 0) continue;
    const int32_t count = counts_[id];
    counts_[id] = 0;
    float& l = work_[id];
    if (l <= 0.0f) {
      l *= p.repeat_penalty;
    } else {
      l /= p.repeat_penalty;
    }
    l -= static_cast<float>(count) * p.frequency_penalty + p.presence_penalty;
  }
}

TokenId Sampler::argmax() const {
  TokenId best = 0;
  for (int32_t i = 1; i < n_vocab_; ++i) {
    if (work_[i] > work_[best]) best = i;  // strict: ties stay with the lower id
  }
  return best;
}

void Sampler::sort_prefix(size_t n) {
  n = std::min(n, n_cand_);
  if (n <= sorted_) return;
  auto cmp = better;
  auto first = candidates_.begin();
  auto end = first + static_cast<ptrdiff_t>(n_cand_);
  if (n < n_cand_) std::nth_element(first + sorted_, first + n, end, cmp);
  std::sort(first + sorted_, first + n, cmp);
  sorted_ = n;
}

void Sampler::apply_top_k(int32_t k) {
  const size_t n = static_cast<size_t>(n_vocab_);
  const bool active = k > 0 && static_cast<size_t>(k) < n;
  // A small k is selected in one pass with a bounded heap whose top is the worst kept
  // candidate; most tokens cost one comparison, and nothing of vocabulary size is written.
  if (active && static_cast<size_t>(k) <= std::min<size_t>(2048, n / 16)) {
    const size_t kk = static_cast<size_t>(k);
    auto cmp = better;
    auto first = candidates_.begin();
    size_t size = 0;
    for (size_t i = 0; i < n; ++i) {
      const Candidate c{work_[i], static_cast<TokenId>(i)};
      if (size < kk) {
        candidates_[size++] = c;
        std::push_heap(first, first + static_cast<ptrdiff_t>(size), cmp);
      } else if (better(c, candidates_[0])) {
        std::pop_heap(first, first + static_cast<ptrdiff_t>(kk), cmp);
        candidates_[kk - 1] = c;
        std::push_heap(first, first + static_cast<ptrdiff_t>(kk), cmp);
      }
    }
    std::sort_heap(first, first + static_cast<ptrdiff_t>(kk), cmp);  // best first
    n_cand_ = kk;
    sorted_ = kk;
    return;
  }
  for (size_t i = 0; i < n; ++i) candidates_[i] = {work_[i], static_cast<TokenId>(i)};
  n_cand_ = n;
  sorted_ = 0;
  if (active) {
    sort_prefix(static_cast<size_t>(k));
    n_cand_ = static_cast<size_t>(k);
  }
}

void Sampler::apply_top_p(float p) {
  if (p >= 1.0f || n_cand_ <= 1) return;
  if (n_cand_ >= kTopPBucketMinSupport && sorted_ < n_cand_) {
    apply_top_p_buckets(p);
    return;
  }
  sort_prefix(1);
  const double mx = candidates_[0].logit;
  if (mx == kNegInf) return;
  double sum = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) sum += std::exp(candidates_[i].logit - mx);
  // Walk the candidates from the most likely down, sorting only as far as the walk reaches.
  double cum = 0.0;
  size_t i = 0;
  size_t chunk = 64;
  while (i < n_cand_) {
    sort_prefix(i + chunk);
    for (; i < sorted_; ++i) {
      cum += std::exp(candidates_[i].logit - mx) / sum;
      if (cum >= p) {
        n_cand_ = i + 1;
        sorted_ = std::min(sorted_, n_cand_);
        return;
      }
    }
    chunk *= 2;
  }
}

void Sampler::apply_top_p_buckets(float p) {
  float mx = kNegInf;
  for (size_t i = 0; i < n_cand_; ++i) mx = std::max(mx, candidates_[i].logit);
  if (mx == kNegInf) return;
  std::fill(bucket_mass_.begin(), bucket_mass_.end(), 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) {
    const float l = candidates_[i].logit;
    const float w = std::exp(l - mx);  // float exp: this runs over the whole vocabulary
    bucket_mass_[top_p_bucket(mx, l)] += w;
    sum += w;
  }
  const double target = static_cast<double>(p) * sum;
  double cum = 0.0;
  int cross = kTopPBuckets;
  for (int b = 0; b <= kTopPBuckets; ++b) {
    if (cum + bucket_mass_[b] >= target) {
      cross = b;
      break;
    }
    cum += bucket_mass_[b];
  }
  // Everything above the crossing bucket stays (in id order, so the result does not depend on
  // the standard library); the crossing bucket is sorted and cut where the mass reaches p.
  size_t kept = 0, n_cross = 0;
  for (size_t i = 0; i < n_cand_; ++i) {
    const int b = top_p_bucket(mx, candidates_[i].logit);
    if (b < cross) {
      candidates_[kept++] = candidates_[i];
    } else if (b == cross) {
      scratch_[n_cross++] = candidates_[i];
    }
  }
  std::sort(scratch_.begin(), scratch_.begin() + static_cast<ptrdiff_t>(n_cross), better);
  for (size_t j = 0; j < n_cross; ++j) {
    candidates_[kept++] = scratch_[j];
    cum += std::exp(scratch_[j].logit - mx);
    if (cum >= target) break;
  }
  n_cand_ = std::max<size_t>(kept, 1);
  sorted_ = 0;
}

void Sampler::apply_min_p(float p) {
  if (p <= 0.0f || n_cand_ <= 1) return;
  sort_prefix(1);
  const float threshold = candidates_[0].logit + std::log(p);
  size_t kept = 0;
  // Order-preserving compaction: survivors of the sorted prefix stay a sorted prefix, since
  // everything after the prefix ranks below it.
  for (size_t i = 0; i < n_cand_; ++i) {
    if (candidates_[i].logit >= threshold) candidates_[kept++] = candidates_[i];
  }
  n_cand_ = std::max<size_t>(kept, 1);
  sorted_ = std::min(sorted_, n_cand_);
}

TokenId Sampler::draw() {
  float mx = kNegInf;
  for (size_t i = 0; i < n_cand_; ++i) mx = std::max(mx, candidates_[i].logit);
  const uint64_t bits = rng_();  // drawn even in degenerate cases so the stream stays aligned
  if (mx == kNegInf) {
    sort_prefix(1);
    return candidates_[0].id;
  }
  const double inv_t = 1.0 / params_.temperature;
  double sum = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) {
    const float w = static_cast<float>(std::exp((static_cast<double>(candidates_[i].logit) - mx) * inv_t));
    work_[i] = w;  // work_ is free once the candidates hold the logits
    sum += w;
  }
  const double target = static_cast<double>(bits >> 11) * 0x1.0p-53 * sum;
  double cum = 0.0;
  size_t last_positive = 0;
  for (size_t i = 0; i < n_cand_; ++i) {
    if (work_[i] <= 0.0f) continue;
    cum += work_[i];
    last_positive = i;
    if (cum > target) return candidates_[i].id;
  }
  return candidates_[last_positive].id;  // rounding left target at the very end
}

TokenId Sampler::prepare_support(const float* logits, std::span<const TokenId> history) {
  load_logits(logits, history);
  if (!(params_.temperature > 0.0f)) {
    const TokenId best = argmax();
    candidates_[0] = {work_[best], best};
    n_cand_ = 1;
    sorted_ = 1;
    return best;
  }
  apply_top_k(params_.top_k);
  apply_top_p(params_.top_p);
  apply_min_p(params_.min_p);
  return -1;
}

void Sampler::distribution(const float* logits, std::span<const TokenId> history, float* probs) {
  std::fill(probs, probs + n_vocab_, 0.0f);
  const TokenId greedy = prepare_support(logits, history);
  if (greedy >= 0) {
    probs[greedy] = 1.0f;
    return;
  }
  // The weights draw() gives the support, normalized (same float rounding of each weight).
  float mx = kNegInf;
  for (size_t i = 0; i < n_cand_; ++i) mx = std::max(mx, candidates_[i].logit);
  if (mx == kNegInf) {
    sort_prefix(1);
    probs[candidates_[0].id] = 1.0f;
    return;
  }
  const double inv_t = 1.0 / params_.temperature;
  double sum = 0.0;
  for (size_t i = 0; i < n_cand_; ++i) {
    const float w = static_cast<float>(std::exp((static_cast<double>(candidates_[i].logit) - mx) * inv_t));
    probs[candidates_[i].id] = w;
    sum += w;
  }
  const double inv_sum = 1.0 / sum;
  for (size_t i = 0; i < n_cand_; ++i) {
    float& w = probs[candidates_[i].id];
    w = static_cast<float>(w * inv_sum);
  }
}

TokenId Sampler::sample(const float* logits, std::span<const TokenId> history) {
  const TokenId greedy = prepare_support(logits, history);
  return greedy >= 0 ? greedy : draw();
}

}  // namespace frugal
