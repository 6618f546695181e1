#include "frugal/decode/stop.h"

#include <algorithm>
#include <utility>

namespace frugal {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kNone: return "none";
    case StopReason::kEog: return "eog";
    case StopReason::kLength: return "length";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kFinished: return "finished";
  }
  return "unknown";
}

Status validate(const StopOptions& opts) {
  for (size_t i = 0; i < opts.stop.size(); ++i) {
    if (opts.stop[i].empty()) {
      return error(ErrorCode::kInvalidArgument, "stop: stop[{}] is empty", i);
    }
  }
  if (opts.max_tokens < -1) {
    return error(ErrorCode::kInvalidArgument,
                 "stop: max_tokens = {} must be -1 (no limit) or >= 0", opts.max_tokens);
  }
  return ok_status();
}

Result<StopChecker> StopChecker::create(StopOptions opts) {
  FRUGAL_RETURN_IF_ERROR(validate(opts));
  return StopChecker(std::move(opts));
}

StopChecker::StopChecker(StopOptions opts) : opts_(std::move(opts)) {
  if (opts_.max_tokens == 0) reason_ = StopReason::kLength;
}

std::string_view StopChecker::matched_stop() const {
  if (reason_ != StopReason::kStopString || stop_index_ < 0) return {};
  return opts_.stop[static_cast<size_t>(stop_index_)];
}

size_t StopChecker::hold_start() const {
  size_t longest = 0;
  for (const std::string& s : opts_.stop) longest = std::max(longest, s.size());
  if (longest == 0) return pending_.size();
  // Only a suffix shorter than the longest stop string can be a proper prefix of one.
  const size_t first = pending_.size() > longest - 1 ? pending_.size() - (longest - 1) : 0;
  for (size_t i = first; i < pending_.size(); ++i) {
    const size_t rest = pending_.size() - i;
    for (const std::string& s : opts_.stop) {
      if (rest < s.size() && s.compare(0, rest, pending_, i, rest) == 0) return i;
    }
  }
  return pending_.size();
}

StopUpdate StopChecker::end(StopReason reason) {
  StopUpdate u;
  u.text = std::move(pending_);
  pending_.clear();
  u.reason = reason;
  reason_ = reason;
  return u;
}

StopUpdate StopChecker::push(TokenId id, std::string_view text) {
  if (done()) return {};
  ++n_generated_;
  if (opts_.is_eog && opts_.is_eog(id)) return end(StopReason::kEog);

  pending_.append(text);
  // Nothing emitted so far can contain or begin a stop string (it would have been held back),
  // so the earliest occurrence, if any, lies inside pending_.
  size_t best_pos = std::string::npos;
  int32_t best_index = -1;
  for (size_t i = 0; i < opts_.stop.size(); ++i) {
    const std::string& s = opts_.stop[i];
    if (s.empty()) continue;
    const size_t pos = pending_.find(s);
    if (pos < best_pos) {
      best_pos = pos;
      best_index = static_cast<int32_t>(i);
    }
  }
  if (best_index >= 0) {
    pending_.resize(best_pos);
    stop_index_ = best_index;
    return end(StopReason::kStopString);
  }

  if (opts_.max_tokens > 0 && n_generated_ >= opts_.max_tokens) return end(StopReason::kLength);

  StopUpdate u;
  const size_t h = hold_start();
  u.text.assign(pending_, 0, h);
  pending_.erase(0, h);
  return u;
}

StopUpdate StopChecker::finish() {
  if (done()) return {};
  return end(StopReason::kFinished);
}

}  // namespace frugal
