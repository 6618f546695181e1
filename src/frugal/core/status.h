// The one error type of frugal: a code from a short, frozen list plus a message for people that
// names the file, key, tensor or field at fault. Library code returns Status / Result<T>; only the
// CLI and server turn them into exit codes or HTTP errors.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace frugal {

// Values are frozen: they appear in logs and on the wire. Never renumber or reuse.
enum class ErrorCode : int {
  kOk = 0,
  kNotFound = 1,
  kCorrupt = 2,
  kInvalidArgument = 3,
  kIo = 4,
  kNotSupported = 5,
  kOverBudget = 6,
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: model.gguf: tensor 'blk.0.attn_q.weight' ends past the end of the file".
  std::string to_string() const;

  // Prefix the message with context, e.g. the file name: st.with_context("model.gguf").
  Status with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status error(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result constructed from an ok Status without a value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace frugal

#define FRUGAL_CONCAT_INNER(a, b) a##b
#define FRUGAL_CONCAT(a, b) FRUGAL_CONCAT_INNER(a, b)

// Return early with the Status if `expr` (a Status) is not ok.
#define FRUGAL_RETURN_IF_ERROR(expr)           \
  do {                                         \
    ::frugal::Status _frugal_st = (expr);      \
    if (!_frugal_st.ok()) return _frugal_st;   \
  } while (0)

// `FRUGAL_ASSIGN_OR_RETURN(auto x, f())`: unwrap a Result or return its Status.
#define FRUGAL_ASSIGN_OR_RETURN(lhs, expr) \
  FRUGAL_ASSIGN_OR_RETURN_IMPL(FRUGAL_CONCAT(_frugal_res_, __LINE__), lhs, expr)
#define FRUGAL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
