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
  CHECK(s.message().find(target.string() + ": cannot write (") == 0);
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
  CHECK(s.message() == target.string() + ".tmp: cannot write");
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
    CHECK(set.add(b, "new b").message() == b + ".tmp: cannot write");
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
