#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

import slicesched.core.files;
import slicesched.core.status;

using namespace slicesched;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("slicesched_files_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("an atomic write replaces the file whole", "[files]") {
  const fs::path dir = scratch("replace");
  const std::string path = (dir / "summary.json").string();
  REQUIRE(write_file_atomically(path, "old").ok());
  REQUIRE(write_file_atomically(path, "new").ok());
  std::ifstream f(path);
  CHECK(std::string(std::istreambuf_iterator<char>(f), {}) == "new");
  CHECK(!fs::exists(path + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("a failed atomic write leaves no temporary behind", "[files]") {
  const fs::path dir = scratch("clash");
  // summary.json is a folder: the rename cannot replace it.
  const fs::path target = dir / "summary.json";
  fs::create_directories(target / "inside");
  const Status s = write_file_atomically(target.string(), "{}\n");
  REQUIRE(!s.ok());
  CHECK(s.message() == target.string() +
                           ": exists and is not a regular file (a folder, device, FIFO or socket); expected a file "
                           "path to write the result to");
  CHECK(!fs::exists(target.string() + ".tmp"));
  CHECK(fs::is_directory(target / "inside"));  // what was there stays
  fs::remove_all(dir);
}

TEST_CASE("an atomic write never removes a folder in the temporary's place", "[files]") {
  const fs::path dir = scratch("tmp_folder");
  const fs::path target = dir / "summary.json";
  fs::create_directories(target.string() + ".tmp");
  const Status s = write_file_atomically(target.string(), "{}\n");
  REQUIRE(!s.ok());
  CHECK(s.message() == target.string() + ".tmp: exists and is not a regular file; it is where " + target.string() +
                           " is staged, so move it away");
  CHECK(fs::is_directory(target.string() + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("staged files appear together or not at all", "[files]") {
  const fs::path dir = scratch("staged");
  const std::string a = (dir / "a.json").string(), b = (dir / "b.csv").string();
  REQUIRE(write_file_atomically(a, "earlier").ok());
  {
    // b cannot be staged (a folder holds its temporary's place): nothing
    // of the set is put in place, and a keeps what it had.
    fs::create_directories(b + ".tmp");
    StagedFiles set;
    REQUIRE(set.add(a, "new a").ok());
    CHECK(fs::exists(a + ".tmp"));
    CHECK(set.add(b, "new b").message() ==
          b + ".tmp: exists and is not a regular file; it is where " + b + " is staged, so move it away");
  }
  CHECK(!fs::exists(a + ".tmp"));
  CHECK(fs::is_directory(b + ".tmp"));  // (not ours: it stays)
  std::ifstream kept(a);
  CHECK(std::string(std::istreambuf_iterator<char>(kept), {}) == "earlier");
  fs::remove_all(b + ".tmp");
  StagedFiles set;
  REQUIRE(set.add(a, "new a").ok());
  REQUIRE(set.add(b, "new b").ok());
  CHECK(!fs::exists(b));  // staged, not yet in place
  REQUIRE(set.commit().ok());
  std::ifstream fa(a), fb(b);
  CHECK(std::string(std::istreambuf_iterator<char>(fa), {}) == "new a");
  CHECK(std::string(std::istreambuf_iterator<char>(fb), {}) == "new b");
  CHECK(!fs::exists(a + ".tmp"));
  fs::remove_all(dir);
}

TEST_CASE("a result path that is a FIFO or folder is refused, a link writes where it leads", "[files]") {
  const fs::path dir = scratch("special");
  auto text = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  // A FIFO (as /dev/null or /dev/full would be): renaming over it would
  // replace it with a regular file.
  const fs::path fifo = dir / "pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const Status s = write_file_atomically(fifo.string(), "x");
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == fifo.string() +
                           ": exists and is not a regular file (a folder, device, FIFO or socket); expected a file "
                           "path to write the result to");
  CHECK(fs::is_fifo(fifo));
  CHECK_FALSE(fs::exists(dir / "pipe.tmp"));
  // A folder likewise, and nothing staged beside it.
  fs::create_directories(dir / "folder");
  CHECK_FALSE(write_file_atomically((dir / "folder").string(), "x").ok());
  CHECK(fs::is_directory(dir / "folder"));
  // A link to a file: the file it leads to is replaced, the link stays a link.
  std::ofstream(dir / "real.json") << "old";
  fs::create_symlink(dir / "real.json", dir / "link.json");
  REQUIRE(write_file_atomically((dir / "link.json").string(), "new").ok());
  CHECK(fs::is_symlink(dir / "link.json"));
  CHECK(text(dir / "real.json") == "new");
  // A link to /dev/null-like (a FIFO) is refused as the FIFO is.
  fs::create_symlink(fifo, dir / "to_pipe");
  CHECK_FALSE(write_file_atomically((dir / "to_pipe").string(), "x").ok());
  CHECK(fs::is_fifo(fifo));
}

TEST_CASE("result paths are checked before the work: folder, kind, one file for two results", "[files]") {
  const fs::path dir = scratch("check");
  const std::string a = (dir / "profile.json").string(), b = (dir / "samples.csv").string();
  CHECK(check_result_paths({{a, "--out"}, {b, "--samples"}}).ok());
  CHECK(check_result_paths({}).ok());
  // The same file twice, also through a link or "./": the second named
  // would overwrite the first.
  CHECK(check_result_paths({{a, "--out"}, {a, "--samples"}}).message() ==
        "--samples and --out name the same file, " + a);
  fs::create_symlink(dir / "profile.json", dir / "alias.json");
  CHECK_FALSE(check_result_paths({{a, "--out"}, {(dir / "alias.json").string(), "--samples"}}).ok());
  CHECK_FALSE(check_result_paths({{a, "--out"}, {(dir / "." / "profile.json").string(), "--samples"}}).ok());
  // A folder that does not exist, a folder in the file's place.
  CHECK(check_result_paths({{(dir / "nope" / "x.json").string(), "--out"}}).message() ==
        "--out: " + (dir / "nope" / "x.json").string() + ": its folder " + (dir / "nope").string() + " does not exist");
  fs::create_directories(dir / "folder");
  CHECK(check_result_paths({{(dir / "folder").string(), "--out"}})
            .message()
            .starts_with("--out: " + (dir / "folder").string() + ": exists and is not a regular file"));
  CHECK_FALSE(fs::exists(dir / "profile.json"));  // (checking writes nothing)
}
