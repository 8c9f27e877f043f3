// Writing results without ever leaving a half-written file behind.
module;
#include <string>
#include <string_view>
#include <utility>
#include <vector>

export module slicesched.core.files;
import slicesched.core.status;

export namespace slicesched {

// Files that appear together or not at all: add() writes each whole under
// its path + ".tmp" at once (where a full disk fails, naming the path),
// commit() renames them all into place (renames take no space). What is not
// committed is removed when the set goes, so what was at the paths before
// stays as it was, never half replaced. A temporary that add() did not
// create (a folder in its place) is never removed. A path that is a
// symbolic link writes the file it leads to; one that is a folder, device,
// FIFO or socket is refused, naming it. Not thread-safe.
class StagedFiles {
 public:
  StagedFiles() = default;
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles();
  Status add(const std::string& path, const std::string& content);
  Status commit();

 private:
  std::vector<std::string> staged_;  // paths whose temporaries are written
};

// Before long work whose results go to `paths`: each names a file that can
// be written (its folder exists and is writable; what is there, if
// anything, is a regular file or a link to one), and no two name the same
// file. Fails with the first that cannot, naming it and `what` it is for.
Status check_result_paths(const std::vector<std::pair<std::string, std::string>>& paths);

// Before reading `path` as `expected` ("a CSV file"): a FIFO, device or
// socket there is refused, naming it (a FIFO would block the run, a device
// like /dev/zero never ends). A regular file, a folder or a missing path
// pass: opening says what is wrong with the last two.
Status refuse_special_file(const std::string& path, std::string_view expected);

// One file through a temporary and a rename, so a crash or a full disk
// leaves either the old file or the whole new one, and a failure removes
// the temporary. Fails naming the path.
Status write_file_atomically(const std::string& path, const std::string& content);

}  // namespace slicesched
