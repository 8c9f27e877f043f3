module;
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

module slicesched.core.files;

namespace slicesched {

StagedFiles::~StagedFiles() {
  std::error_code ignored;
  for (const std::string& p : staged_) std::filesystem::remove(p + ".tmp", ignored);
}

namespace {

namespace fs = std::filesystem;

// What `path` names when written: the file a symbolic link leads to (the
// link stays a link), or the path itself. A device, FIFO, socket or folder
// there is refused: renaming over it would replace it (as root, /dev/null
// with a regular file), and writing to it is no result file either.
Result<std::string> result_file(const std::string& path) {
  std::error_code ec;
  std::string target = path;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    // Followed by hand: a link to a file not written yet leads there too.
    fs::path p = path;
    for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
      const fs::path next = fs::read_symlink(p, ec);
      if (ec || hops == 40) return InvalidArgument(path + ": a link that cannot be followed");
      p = next.is_absolute() ? next : p.parent_path() / next;
    }
    target = fs::weakly_canonical(p, ec).string();
    if (ec) return InvalidArgument(path + ": a link that cannot be followed (" + ec.message() + ")");
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st))
    return InvalidArgument(path +
                           ": exists and is not a regular file (a folder, device, FIFO or socket); "
                           "expected a file path to write the result to");
  const fs::file_status tmp = fs::symlink_status(target + ".tmp", ec);
  if (fs::exists(tmp) && !fs::is_regular_file(tmp))
    return InvalidArgument(target + ".tmp: exists and is not a regular file; it is where " + path +
                           " is staged, so move it away");
  return target;
}

}  // namespace

Status StagedFiles::add(const std::string& given, const std::string& content) {
  auto resolved = result_file(given);
  if (!resolved.ok()) return resolved.status();
  const std::string& path = resolved.value();
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary);
  if (!f) return InvalidArgument(tmp + ": cannot write (" + std::strerror(errno) + ")");
  staged_.push_back(path);  // (created: ours to remove)
  f << content;
  if (!f.flush()) return InvalidArgument(path + ": write failed (disk full?)");
  return Status::Ok();
}

Status StagedFiles::commit() {
  for (std::size_t i = 0; i < staged_.size(); ++i) {
    std::error_code ec;
    std::filesystem::rename(staged_[i] + ".tmp", staged_[i], ec);
    if (ec) {
      const std::string failed = staged_[i];
      staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(i));
      return InvalidArgument(failed + ": cannot write (" + ec.message() + ")");
    }
  }
  staged_.clear();
  return Status::Ok();
}

Status check_result_paths(const std::vector<std::pair<std::string, std::string>>& paths) {
  std::vector<std::pair<fs::path, std::string>> seen;
  for (const auto& [path, what] : paths) {
    auto resolved = result_file(path);
    if (!resolved.ok()) return InvalidArgument(what + ": " + resolved.status().message());
    std::error_code ec;
    const fs::path file = fs::weakly_canonical(resolved.value(), ec);
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec))
      return InvalidArgument(what + ": " + path + ": its folder " + dir.string() + " does not exist");
    if (::access(dir.c_str(), W_OK) != 0)
      return InvalidArgument(what + ": " + path + ": its folder " + dir.string() + " is not writable (" +
                             std::strerror(errno) + ")");
    for (const auto& [other, other_what] : seen)
      if (other == file) return InvalidArgument(what + " and " + other_what + " name the same file, " + path);
    seen.push_back({file, what});
  }
  return Status::Ok();
}

Status refuse_special_file(const std::string& path, std::string_view expected) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st))
    return InvalidArgument(path + ": not a regular file (a FIFO, device or socket), expected " + std::string(expected));
  return Status::Ok();
}

Status write_file_atomically(const std::string& path, const std::string& content) {
  StagedFiles file;
  if (Status s = file.add(path, content); !s.ok()) return s;
  return file.commit();
}

}  // namespace slicesched
