module;
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

module slicesched.core.files;

namespace slicesched {

Status write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  // Once created, the temporary goes whatever fails: a failed write leaves
  // nothing new (and never removes what was there before).
  auto failed = [&](const std::string& message) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return InvalidArgument(message);
  };
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return InvalidArgument(tmp + ": cannot write");
    f << content;
    if (!f.flush()) return failed(tmp + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return failed(path + ": cannot write (" + ec.message() + ")");
  return Status::Ok();
}

}  // namespace slicesched
