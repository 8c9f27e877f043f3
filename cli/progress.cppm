// Progress on stderr for long runs: a bar on a terminal; otherwise a line
// every 25 %, and at most one a minute between them, so a log of an
// hour-long run (10,000 accelerators) still shows it moving.
module;
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

export module slicesched.cli.progress;
import slicesched.engine.progress;
import slicesched.core.ids;

export namespace slicesched::cli {

inline bool stderr_is_tty() { return isatty(fileno(stderr)) != 0; }

// A ProgressFn drawing `name`'s progress (requests ended of all, clock).
inline ProgressFn progress_printer(const std::string& name) {
  const bool tty = stderr_is_tty();
  using Clock = std::chrono::steady_clock;
  return [tty, name, last = Clock::now()](Nanos now, std::size_t done, std::size_t total) mutable {
    const int pct = total ? static_cast<int>(100 * done / total) : 100;
    if (tty)
      std::fprintf(stderr, "\r  %-16s [%-40s] %3d%%  %zu/%zu requests  t=%.0f s ", name.c_str(),
                   std::string(static_cast<std::size_t>(pct * 40 / 100), '#').c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
    else if (pct % 25 == 0 || Clock::now() - last >= std::chrono::minutes(1)) {
      last = Clock::now();
      std::fprintf(stderr, "  %s: %d%% (%zu/%zu requests, t=%.0f s)\n", name.c_str(), pct, done, total,
                   static_cast<double>(now) / 1e9);
    }
  };
}

}  // namespace slicesched::cli
