// `serve --spawn-local`: the config's [[hosts]] executors as child
// processes of this one, for a multi-process run on one machine. Each
// listens on an ipc:// endpoint in a private folder (no ports to collide).
// No orphans: a child dies with this process (PR_SET_PDEATHSIG), the
// destructor ends and reaps every child still running, and an executor
// whose scheduler goes silent exits on its own.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace slicesched::cli {

class LocalExecutors {
 public:
  // Starts `slicesched executor` (this binary) for each host name, on
  // config `config`. Throws std::runtime_error (one line) when a child
  // cannot be started.
  LocalExecutors(const std::string& config, const std::vector<std::string>& hosts);
  // Waits up to 5 s for the children to exit (the scheduler told them to),
  // then kills the rest; removes the folder.
  ~LocalExecutors();
  LocalExecutors(const LocalExecutors&) = delete;
  LocalExecutors& operator=(const LocalExecutors&) = delete;

  // Per host, in order: where its executor listens.
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::string dir_;
  std::vector<std::string> addresses_;
  std::vector<pid_t> pids_;
};

}  // namespace slicesched::cli
