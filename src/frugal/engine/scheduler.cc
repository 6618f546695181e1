#include "frugal/engine/scheduler.h"

#include <algorithm>
#include <cassert>

namespace frugal {

int32_t StepPlan::n_tokens() const {
  int32_t n = 0;
  for (const auto& it : items) n += it.end - it.begin;
  return n;
}

Scheduler::Scheduler(const SchedulerOptions& opts) : opts_(opts) {
  slots_.resize(static_cast<size_t>(std::max(opts_.n_slots, 1)));
}

Status Scheduler::enqueue(SeqId id, std::vector<TokenId> prompt, double now_s, bool shares_kv) {
  if (prompt.empty()) return error(ErrorCode::kInvalidArgument, "the prompt is empty (no tokens)");
  if (static_cast<int64_t>(prompt.size()) >= opts_.slot_capacity) {
    return error(ErrorCode::kInvalidArgument,
                 "the prompt has {} tokens but a sequence holds at most {} (prompt and output together)",
                 prompt.size(), opts_.slot_capacity);
  }
  if (static_cast<int32_t>(waiting_.size()) >= opts_.max_waiting) {
    return error(ErrorCode::kOverBudget, "the server is busy: {} requests are already waiting (queue limit {})",
                 waiting_.size(), opts_.max_waiting);
  }
  waiting_.push_back({id, std::move(prompt), now_s, shares_kv});
  return ok_status();
}

bool Scheduler::is_waiting(SeqId id) const {
  return std::any_of(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.id == id; });
}

int32_t Scheduler::shared_prefix(int slot, std::span<const TokenId> prompt) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  if (!s.shares_kv) return 0;
  const size_t n = std::min({static_cast<size_t>(s.n_kv), s.tokens.size(), prompt.size()});
  size_t i = 0;
  while (i < n && s.tokens[i] == prompt[i]) ++i;
  // The last prompt token is always recomputed: its logits pick the first new token.
  return static_cast<int32_t>(std::min(i, prompt.size() - 1));
}

Admission Scheduler::choose(const Waiting& w) const {
  Admission a;
  a.id = w.id;
  int best = -1;
  int32_t best_len = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    if (s.owner >= 0) continue;
    const int32_t len = opts_.prefix_cache && w.shares_kv ? shared_prefix(i, w.prompt) : 0;
    if (best < 0 || len > best_len || (len == best_len && s.last_used < slots_[static_cast<size_t>(best)].last_used)) {
      best = i;
      best_len = len;
    }
  }
  assert(best >= 0);
  a.slot = best;
  a.reused = best_len;
  a.copy_end = best_len;
  if (opts_.prefix_cache && w.shares_kv) {
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      if (i == best) continue;
      const int32_t len = shared_prefix(i, w.prompt);
      if (len >= a.copy_end + opts_.min_copy_tokens && len > a.copy_end) {
        a.copy_from = i;
        a.copy_end = len;
      }
    }
  }
  return a;
}

Admission Scheduler::admit(Waiting& w, const Admission& a) {
  Slot& s = slots_[static_cast<size_t>(a.slot)];
  s.owner = w.id;
  s.tokens = std::move(w.prompt);
  s.n_kv = a.copy_end;
  s.shares_kv = w.shares_kv;
  s.last_used = ++tick_;
  running_[w.id] = Running{a.slot, static_cast<int32_t>(s.tokens.size()), tick_};
  return a;
}

StepPlan Scheduler::plan(double now_s) {
  StepPlan p;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (now_s - it->arrival_s > opts_.queue_timeout_s) {
      p.refused.push_back({it->id, fmt::format("waited {:.1f} s for a free sequence slot (queue timeout {:.1f} s)",
                                               now_s - it->arrival_s, opts_.queue_timeout_s)});
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::pair<uint64_t, SeqId>> order;
  order.reserve(running_.size());
  for (const auto& [id, r] : running_) order.emplace_back(r.order, id);
  std::sort(order.begin(), order.end());

  int32_t budget = opts_.max_step_tokens;
  const auto add_item = [&](SeqId id, int slot) {
    const Slot& s = slots_[static_cast<size_t>(slot)];
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    const int32_t end = std::min(n, s.n_kv + budget);
    if (end <= s.n_kv) return;
    p.items.push_back({id, slot, s.n_kv, end, end == n});
    budget -= end - s.n_kv;
  };
  // Decodes first: one token each for every sequence that has generated already.
  for (const auto& [ord, id] : order) {
    const Running& r = running_.at(id);
    const Slot& s = slots_[static_cast<size_t>(r.slot)];
    if (static_cast<int32_t>(s.tokens.size()) > r.n_prompt && budget > 0) add_item(id, r.slot);
  }
  for (const auto& [ord, id] : order) {
    const Running& r = running_.at(id);
    const Slot& s = slots_[static_cast<size_t>(r.slot)];
    if (static_cast<int32_t>(s.tokens.size()) == r.n_prompt && budget > 0) add_item(id, r.slot);
  }
  while (!waiting_.empty() && budget > 0 && n_running() < static_cast<int>(slots_.size())) {
    Admission a = choose(waiting_.front());
    GateAnswer g = GateAnswer::kAdmit;
    // Each kChooseAgain dropped a cached prefix, so this ends.
    while (gate_ && (g = gate_(a, static_cast<int32_t>(waiting_.front().prompt.size()))) == GateAnswer::kChooseAgain) {
      a = choose(waiting_.front());
    }
    if (g == GateAnswer::kWait) break;
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    a = admit(w, a);
    p.admitted.push_back(a);
    add_item(a.id, a.slot);
  }
  return p;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const auto& it : plan.items) {
    if (!running_.count(it.id)) continue;  // released meanwhile
    Slot& s = slots_[static_cast<size_t>(it.slot)];
    s.n_kv = std::max(s.n_kv, it.end);
  }
}

bool Scheduler::append(SeqId id, TokenId token) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  Slot& s = slots_[static_cast<size_t>(it->second.slot)];
  // The new token needs row tokens.size() when it is fed back.
  if (static_cast<int32_t>(s.tokens.size()) >= opts_.slot_capacity) return false;
  s.tokens.push_back(token);
  return true;
}

bool Scheduler::set_computed(SeqId id, int32_t n_kv) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  Slot& s = slots_[static_cast<size_t>(it->second.slot)];
  s.n_kv = std::clamp(n_kv, s.n_kv, static_cast<int32_t>(s.tokens.size()));
  return true;
}

void Scheduler::release(SeqId id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  Slot& s = slots_[static_cast<size_t>(it->second.slot)];
  s.owner = -1;
  s.tokens.resize(static_cast<size_t>(s.n_kv));
  if (!opts_.prefix_cache || !s.shares_kv) {
    s.tokens.clear();
    s.n_kv = 0;
  }
  s.shares_kv = true;
  s.last_used = ++tick_;
  running_.erase(it);
}

void Scheduler::drop_cache(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.owner < 0) s.tokens.clear();
  s.n_kv = 0;
}

bool Scheduler::cancel(SeqId id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->id == id) {
      waiting_.erase(it);
      return true;
    }
  }
  if (!running_.count(id)) return false;
  release(id);
  return true;
}

bool Scheduler::preempt(SeqId id, double now_s) {
  auto it = running_.find(id);
  if (it == running_.end()) return false;
  Slot& s = slots_[static_cast<size_t>(it->second.slot)];
  Waiting w{id, std::move(s.tokens), now_s, s.shares_kv};
  s.tokens.clear();
  s.n_kv = 0;
  s.owner = -1;
  s.shares_kv = true;
  s.last_used = ++tick_;
  running_.erase(it);
  waiting_.push_front(std::move(w));
  return true;
}

int Scheduler::cached_free_slot(int keep_a, int keep_b) const {
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[static_cast<size_t>(i)];
    if (s.owner < 0 && s.n_kv > 0 && i != keep_a && i != keep_b) return i;
  }
  return -1;
}

const Scheduler::Slot& Scheduler::slot_of_seq(SeqId id) const {
  return slots_[static_cast<size_t>(running_.at(id).slot)];
}

std::span<const TokenId> Scheduler::tokens(SeqId id) const { return slot_of_seq(id).tokens; }
int32_t Scheduler::n_prompt(SeqId id) const { return running_.at(id).n_prompt; }
int32_t Scheduler::n_computed(SeqId id) const { return slot_of_seq(id).n_kv; }
int Scheduler::slot_of(SeqId id) const {
  auto it = running_.find(id);
  return it == running_.end() ? -1 : it->second.slot;
}

int64_t Scheduler::running_rows() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.owner >= 0 ? s.n_kv : 0;
  return n;
}

int64_t Scheduler::cached_rows() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.n_kv;
  return n;
}

std::span<const TokenId> Scheduler::slot_tokens(int slot) const {
  const Slot& s = slots_[static_cast<size_t>(slot)];
  return std::span<const TokenId>(s.tokens).first(static_cast<size_t>(std::min<int64_t>(s.n_kv, s.tokens.size())));
}

}  // namespace frugal
