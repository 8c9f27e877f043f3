// How a command fails: it throws CommandError up to main, the only place
// that catches, which prints its one line ("slicesched: " + what()) and
// exits with its status. compose/ and the live session return Status and
// Result; a command turns them into this at its edge (check,
// value_or_fail).
module;
#include <stdexcept>
#include <string>
#include <utility>

export module slicesched.cli.fail;
import slicesched.core.status;

export namespace slicesched::cli {

struct CommandError : std::runtime_error {
  explicit CommandError(const std::string& line, int status = 2) : std::runtime_error(line), status(status) {}
  int status;  // the exit status
};

// Throws CommandError with the message.
[[noreturn]] inline void fail(const std::string& message, int status = 2) { throw CommandError(message, status); }
inline void check(const Status& s) {
  if (!s.ok()) fail(s.message());
}
// The value of `r`, or fail() with its message.
template <typename T>
T value_or_fail(Result<T> r) {
  if (!r.ok()) fail(r.status().message());
  return std::move(r).value();
}

// The same, said of config `path`: its message is prefixed with the path
// unless it names it first already (most config errors do).
inline std::string in_config(const std::string& path, const std::string& message) {
  return message.rfind(path, 0) == 0 ? message : path + ": " + message;
}
[[noreturn]] inline void fail_in(const std::string& path, const std::string& message, int status = 2) {
  fail(in_config(path, message), status);
}
inline void check_in(const std::string& path, const Status& s) {
  if (!s.ok()) fail_in(path, s.message());
}
template <typename T>
T value_or_fail_in(const std::string& path, Result<T> r) {
  if (!r.ok()) fail_in(path, r.status().message());
  return std::move(r).value();
}

}  // namespace slicesched::cli
