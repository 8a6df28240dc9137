// Errors everywhere below tools/: a Status carries a message with context, never an exception.
//
//   RETURN_IF_ERROR(loadWeights(path)) << "while loading plan " << planPath;
//   ASSIGN_OR_RETURN(HostTensor t, readNpy(path));
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace megac {

class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool isOk() const { return !failed_; }
  explicit operator bool() const { return isOk(); }
  const std::string &message() const { return message_; }

  /// Appends context: `status << ": while loading " << path`.
  template <typename T> Status &operator<<(const T &value) {
    std::ostringstream os;
    os << value;
    message_ += os.str();
    return *this;
  }

private:
  bool failed_ = false;
  std::string message_;
};

/// A value or the Status saying why there is none.
template <typename T> class [[nodiscard]] StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {}
  bool isOk() const { return value_.has_value(); }
  const Status &status() const { return status_; }
  T &value() & { return *value_; }
  const T &value() const & { return *value_; }
  T &&value() && { return std::move(*value_); }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }
  T &operator*() & { return *value_; }

private:
  std::optional<T> value_;
  Status status_;
};

} // namespace megac

#define MEGAC_CONCAT_INNER(a, b) a##b
#define MEGAC_CONCAT(a, b) MEGAC_CONCAT_INNER(a, b)

/// Returns the Status of `expr` from the enclosing function if it failed; context may follow
/// with <<. (The streamed text is appended to the error and the function returns it.)
#define RETURN_IF_ERROR(expr)                                                                      \
  for (::megac::Status megac_status_ = (expr); !megac_status_.isOk();)                             \
  return megac_status_

/// `ASSIGN_OR_RETURN(T x, expr)`: declares x from a StatusOr, or returns its Status.
#define ASSIGN_OR_RETURN(decl, expr)                                                               \
  auto MEGAC_CONCAT(megac_or_, __LINE__) = (expr);                                                 \
  if (!MEGAC_CONCAT(megac_or_, __LINE__).isOk())                                                   \
    return MEGAC_CONCAT(megac_or_, __LINE__).status();                                             \
  decl = std::move(MEGAC_CONCAT(megac_or_, __LINE__)).value()
