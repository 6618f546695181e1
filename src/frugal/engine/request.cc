#include "frugal/engine/request.h"

namespace frugal {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContext: return "context";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

bool RequestHandle::wait(RequestUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (delivered_done_) return false;
  cv_.wait_for(lk, timeout, [&] { return has_news_; });
  if (!has_news_) return false;
  out = std::move(pending_);
  pending_ = RequestUpdate();
  has_news_ = false;
  delivered_done_ = out.done;
  return true;
}

void RequestHandle::push(std::string_view text, TokenOutput* token) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.text.append(text);
    if (token) pending_.tokens.push_back(std::move(*token));
    has_news_ = true;
  }
  cv_.notify_all();
}

void RequestHandle::finish(FinishedRequest f) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.done = true;
    pending_.finished = std::move(f);
    has_news_ = true;
  }
  cv_.notify_all();
}

}  // namespace frugal
