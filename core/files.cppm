// Writing results without ever leaving a half-written file behind.
module;
#include <string>

export module slicesched.core.files;
import slicesched.core.status;

export namespace slicesched {

// Writes `content` to `path` through a temporary file and a rename, so a
// crash or a full disk leaves either the old file or the whole new one,
// and a failure removes the temporary. Fails naming the path.
Status write_file_atomically(const std::string& path, const std::string& content);

}  // namespace slicesched
