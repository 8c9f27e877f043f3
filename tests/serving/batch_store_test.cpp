// The batch store keeps what it accepted across a reopen (a server
// restart): lines stay pending until their result is written, the last
// result writes the output and error files and completes the batch, and a
// result written twice counts once.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

import slicesched.core.status;
import slicesched.serving.batch_store;

using namespace slicesched;
using namespace slicesched::serving;

namespace {

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("slicesched_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<BatchStore> open_store(const std::filesystem::path& p) {
  auto s = BatchStore::open(p.string());
  if (!s.ok()) FAIL(s.status().message());
  return std::move(s).value();
}

}  // namespace

TEST_CASE("batch store: accepted lines survive a reopen until answered", "[serving][batch]") {
  const auto dir = fresh_dir("batch_store");
  const auto path = dir / "batches.sqlite";
  std::string batch_id, file_id;
  {
    auto store = open_store(path);
    auto f = store->add_file("in.jsonl", "batch", "{\"custom_id\": \"a\"}\n");
    REQUIRE(f.ok());
    file_id = f->id;
    CHECK(f->bytes == 19);
    auto b = store->create_batch(file_id, "/v1/completions", "24h", {{"a", "{}"}, {"b", "{}"}, {"c", "{}"}});
    REQUIRE(b.ok());
    batch_id = b->id;
    CHECK(b->status == "in_progress");
    CHECK(b->total == 3);
    REQUIRE(store->finish_line(batch_id, 2, true, "{\"custom_id\": \"b\"}").ok());
  }  // "killed" here: line 2 answered, 1 and 3 not
  auto store = open_store(path);
  auto content = store->file_content(file_id);
  REQUIRE(content.ok());
  REQUIRE(content->has_value());
  CHECK(**content == "{\"custom_id\": \"a\"}\n");
  auto pending = store->pending(10, {});
  REQUIRE(pending.ok());
  REQUIRE(pending->size() == 2);
  CHECK((*pending)[0].line == 1);
  CHECK((*pending)[0].custom_id == "a");
  CHECK((*pending)[1].line == 3);
  // Lines already running are left out.
  auto others = store->pending(10, {{batch_id, 1}});
  REQUIRE(others.ok());
  REQUIRE(others->size() == 1);
  CHECK((*others)[0].line == 3);

  REQUIRE(store->finish_line(batch_id, 3, false, "{\"custom_id\": \"c\", \"error\": 1}").ok());
  REQUIRE(store->finish_line(batch_id, 3, true, "{\"twice\": true}").ok());  // already answered: unchanged
  auto b = store->batch(batch_id);
  REQUIRE(b.ok());
  CHECK((*b)->status == "in_progress");
  CHECK((*b)->completed == 1);
  CHECK((*b)->failed == 1);
  CHECK((*b)->output_file_id.empty());

  REQUIRE(store->finish_line(batch_id, 1, true, "{\"custom_id\": \"a\"}").ok());
  b = store->batch(batch_id);
  REQUIRE(b.ok());
  CHECK((*b)->status == "completed");
  CHECK((*b)->completed == 2);
  CHECK((*b)->failed == 1);
  CHECK((*b)->completed_at > 0);
  auto out = store->file_content((*b)->output_file_id);
  REQUIRE(out.ok());
  CHECK(**out == "{\"custom_id\": \"a\"}\n{\"custom_id\": \"b\"}\n");  // input order
  auto err = store->file_content((*b)->error_file_id);
  REQUIRE(err.ok());
  CHECK(**err == "{\"custom_id\": \"c\", \"error\": 1}\n");
  auto none = store->pending(10, {});
  REQUIRE(none.ok());
  CHECK(none->empty());
  auto missing = store->batch("batch_nope");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("batch store: a store that cannot be opened says where", "[serving][batch]") {
  auto s = BatchStore::open("/nonexistent-folder/x/batches.sqlite");
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("batch store /nonexistent-folder/x/batches.sqlite: cannot open") == 0);
}
