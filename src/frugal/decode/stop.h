// When generation ends, and which text a streaming response may show so far. Stop strings are
// matched on the generated text, so they may span token boundaries; text that could still turn
// out to be the start of a stop string is held back until it is known not to be one, and neither
// a stop string nor anything after it is ever emitted (as the OpenAI, Anthropic and llama.cpp
// APIs require). End-of-generation tokens are recognised by a predicate the caller supplies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/status.h"
#include "frugal/core/token_id.h"

namespace frugal {

// Values are frozen: they reach logs and the wire.
enum class StopReason : int {
  kNone = 0,        // still generating
  kEog = 1,         // an end-of-generation token (EOS, EOT, ...)
  kLength = 2,      // max_tokens generated
  kStopString = 3,  // one of the stop strings appeared
  kFinished = 4,    // the caller ended generation (finish())
};

const char* stop_reason_name(StopReason reason);

struct StopOptions {
  std::vector<std::string> stop;        // non-empty strings; matched byte for byte
  int32_t max_tokens = -1;              // tokens to generate at most; -1: no limit; 0: none
  std::function<bool(TokenId)> is_eog;  // true for tokens that end generation; empty: none do
};

// kInvalidArgument naming the field ("stop[1] is empty", "max_tokens = -5 ...").
Status validate(const StopOptions& opts);

// What one generated token changed.
struct StopUpdate {
  std::string text;                      // text that may be emitted now (possibly empty)
  StopReason reason = StopReason::kNone;  // kNone while generation continues
  int32_t stop_index = -1;               // index into StopOptions::stop for kStopString
};

class StopChecker {
 public:
  static Result<StopChecker> create(StopOptions opts);
  // Trusts the caller to have validated `opts` (empty stop strings are ignored).
  explicit StopChecker(StopOptions opts);

  // Feeds one generated token and its text (valid UTF-8 pieces, e.g. from a Detokenizer; the
  // text of an end-of-generation token is ignored). Once done(), further calls return nothing.
  StopUpdate push(TokenId id, std::string_view text);
  // Ends generation from outside (cancellation, context full): releases held-back text.
  StopUpdate finish();

  bool done() const { return reason_ != StopReason::kNone; }
  StopReason reason() const { return reason_; }
  int32_t n_generated() const { return n_generated_; }  // tokens pushed before done()
  // The stop string that ended generation (empty unless reason() is kStopString).
  std::string_view matched_stop() const;
  // Text received but not yet emitted because it may begin a stop string.
  std::string_view held_back() const { return pending_; }

 private:
  StopUpdate end(StopReason reason);
  // Smallest i such that pending_[i..] is a proper prefix of some stop string (pending_.size()
  // when there is none).
  size_t hold_start() const;

  StopOptions opts_;
  std::string pending_;
  int32_t n_generated_ = 0;
  StopReason reason_ = StopReason::kNone;
  int32_t stop_index_ = -1;
};

}  // namespace frugal
