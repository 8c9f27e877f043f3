module;
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

module slicesched.core.files;

namespace slicesched {

Status write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return InvalidArgument(tmp + ": cannot write");
    f << content;
    if (!f.flush()) return InvalidArgument(tmp + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return InvalidArgument(path + ": cannot write (" + ec.message() + ")");
  return Status::Ok();
}

}  // namespace slicesched
