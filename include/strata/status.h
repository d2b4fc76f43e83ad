// Copyright 2026 The Strata Authors.
//
// Status and StatusOr<T>: how every Strata API reports failure. No exception
// crosses the library boundary. A message always names the thing it is about
// (a path, a peer, a bucket, a step) and what went wrong.
//
// The codes are a closed set with retry guidance, after absl::Status:
//   kUnavailable        transient; retrying the same call may succeed.
//   kAborted            retry at a higher level (e.g. restart the whole save).
//   kFailedPrecondition do not retry until the system state is fixed.
//   kDataLoss           bytes are corrupt or truncated; use another copy.
#ifndef STRATA_STATUS_H_
#define STRATA_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kFailedPrecondition = 4,
  kAborted = 5,
  kOutOfRange = 6,
  kUnavailable = 7,
  kDataLoss = 8,
  kResourceExhausted = 9,
  kPermissionDenied = 10,
  kDeadlineExceeded = 11,
  kCancelled = 12,
  kUnimplemented = 13,
  kInternal = 14,
};

// Returns a stable name such as "NOT_FOUND".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "NOT_FOUND: no checkpoint in /x" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status ResourceExhaustedError(std::string message);
Status PermissionDeniedError(std::string message);
Status DeadlineExceededError(std::string message);
Status CancelledError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);

// Maps an errno value to the closest code; the message is
// "<context>: <strerror(err)>".
Status ErrnoToStatus(int err, std::string_view context);

namespace status_internal {
// Prints "StatusOr accessed without a value: <status>" to stderr and aborts.
[[noreturn]] void DieOfBadAccess(const Status& status);
}  // namespace status_internal

// Holds either a value or a non-OK status. Reading the value of an error
// (value(), *, ->) aborts the process with the status's message, as absl's
// StatusOr does: check ok() first, or use value_or().
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    assert(!status.ok() && "StatusOr built from an OK status");
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok(); aborts otherwise.
  T& value() & { return Checked(), *value_; }
  const T& value() const& { return Checked(), *value_; }
  T&& value() && { return Checked(), std::move(*value_); }
  T& operator*() & { return Checked(), *value_; }
  const T& operator*() const& { return Checked(), *value_; }
  T&& operator*() && { return Checked(), std::move(*value_); }
  T* operator->() { return Checked(), &*value_; }
  const T* operator->() const { return Checked(), &*value_; }

  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  void Checked() const {
    if (!value_) status_internal::DieOfBadAccess(status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace strata

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::strata::Status strata_status_ = (expr);        \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// `STRATA_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value, or
// returns F()'s status from the enclosing function.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_statusor_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // STRATA_STATUS_H_
