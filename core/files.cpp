module;
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

module slicesched.core.files;

namespace slicesched {

StagedFiles::~StagedFiles() {
  std::error_code ignored;
  for (const std::string& p : staged_) std::filesystem::remove(p + ".tmp", ignored);
}

Status StagedFiles::add(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary);
  if (!f) return InvalidArgument(tmp + ": cannot write");
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

Status write_file_atomically(const std::string& path, const std::string& content) {
  StagedFiles file;
  if (Status s = file.add(path, content); !s.ok()) return s;
  return file.commit();
}

}  // namespace slicesched
