// Outcomes as values: every recoverable failure in the core is a Status or a
// Result<T> that the caller must look at (both are [[nodiscard]]).
module;
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

export module slicesched.core.status;

export namespace slicesched {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed
  kNotFound,            // a named thing does not exist
  kFailedPrecondition,  // the thing exists but is in the wrong state
  kAlreadyExists,
  kResourceExhausted,  // e.g. a placement that does not fit in HBM
  kAborted,            // gave up because something it depended on failed
  kInternal,           // an operator or plugin failed while running
};

// A status is cheap when ok (no allocation) and carries a one-line message
// otherwise. The message is written for a user: it names what was wrong.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  // inline: members of a module's classes are not implicitly inline, and
  // these are on every hot path.
  inline static Status Ok() { return {}; }
  inline bool ok() const { return code_ == StatusCode::kOk; }
  inline StatusCode code() const { return code_; }
  inline const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Value-or-error. Accessing value() of an error result is a programming
// error and aborts via std::get's exception; check ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  // An ok status carries no value; building a Result from one is a bug in
  // the caller, reported as an error rather than an empty success.
  Result(Status status)  // NOLINT: implicit by design
      : v_(status.ok() ? Status(StatusCode::kFailedPrecondition, "internal: Result built from an ok status")
                       : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  // A reference, so `r.status().message()` may be held while `r` lives.
  const Status& status() const { return ok() ? kOk : std::get<Status>(v_); }

 private:
  static inline const Status kOk{};
  std::variant<T, Status> v_;
};

}  // namespace slicesched
