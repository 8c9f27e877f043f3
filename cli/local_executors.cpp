#include "local_executors.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace slicesched::cli {

LocalExecutors::LocalExecutors(const std::string& config, const std::vector<std::string>& hosts) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "slicesched-XXXXXX").string();
  if (!mkdtemp(tmpl.data()))
    throw std::runtime_error("--spawn-local: cannot make a folder: " + std::string(std::strerror(errno)));
  dir_ = tmpl;
  const pid_t parent = getpid();
  for (const std::string& h : hosts) {
    addresses_.push_back("ipc://" + dir_ + "/" + std::to_string(addresses_.size()) + ".sock");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("--spawn-local: fork: " + std::string(std::strerror(errno)));
    if (pid == 0) {
      // Dies with the scheduler, even when it is killed outright.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      execl("/proc/self/exe", "slicesched", "executor", "--listen", addresses_.back().c_str(), "--config",
            config.c_str(), "--host", h.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    pids_.push_back(pid);
  }
}

LocalExecutors::~LocalExecutors() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (pid_t& pid : pids_) {
    while (pid > 0) {
      const pid_t r = waitpid(pid, nullptr, WNOHANG);
      if (r == pid || (r < 0 && errno != EINTR))
        pid = 0;
      else if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        pid = 0;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace slicesched::cli
