// The batch store keeps what it accepted across a reopen (a server
// restart): lines stay pending until their result is written, the last
// result writes the output and error files and completes the batch, and a
// result written twice counts once.
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

import slicesched.core.status;
import slicesched.serving.batch_store;
import slicesched.serving.batches;
import slicesched.engine.inbox;
import slicesched.serving.api;

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

TEST_CASE("batch store: cancel gives up what did not start, keeps what ran, and ends with the last running line",
          "[serving][batch]") {
  const auto dir = fresh_dir("batch_cancel");
  auto store = open_store(dir / "batches.sqlite");
  auto f = store->add_file("in.jsonl", "batch", "x\n");
  REQUIRE(f.ok());
  auto b = store->create_batch(f->id, "/v1/completions", "1h", {{"a", "{}"}, {"b", "{}"}, {"c", "{}"}, {"d", "{}"}},
                               3600, R"({"team":"search"})");
  REQUIRE(b.ok());
  CHECK(b->expires_at == b->created_at + 3600);
  CHECK(b->metadata == R"({"team":"search"})");
  REQUIRE(store->finish_line(b->id, 1, true, "{\"a\": 1}").ok());
  // The input of a batch in progress cannot be deleted.
  auto busy = store->delete_file(f->id);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().message().find("still in progress") != std::string::npos);
  // Line 2 runs; 3 and 4 have not started: they are given up.
  auto c = store->stop_batch(b->id, false, {{b->id, 2}});
  REQUIRE(c.ok());
  REQUIRE(c->has_value());
  CHECK((*c)->status == "cancelling");
  auto pending = store->pending(10, {});
  REQUIRE(pending.ok());
  REQUIRE(pending->size() == 1);
  CHECK((*pending)[0].line == 2);
  REQUIRE(store->finish_line(b->id, 2, true, "{\"b\": 2}").ok());  // the last running line ends it
  auto done = store->batch(b->id);
  REQUIRE(done.ok());
  CHECK((*done)->status == "cancelled");
  CHECK((*done)->completed == 2);
  CHECK((*done)->ended_at > 0);
  CHECK((*done)->metadata == R"({"team":"search"})");
  auto out = store->file_content((*done)->output_file_id);
  REQUIRE(out.ok());
  CHECK(**out == "{\"a\": 1}\n{\"b\": 2}\n");
  // Cancelling again changes nothing; an unknown batch is nothing.
  auto again = store->stop_batch(b->id, false, {});
  REQUIRE(again.ok());
  CHECK((*again)->status == "cancelled");
  auto nope = store->stop_batch("batch_nope", false, {});
  REQUIRE(nope.ok());
  CHECK_FALSE(nope->has_value());
  // Expiry: a batch past expires_at, nothing running, expires at once.
  auto e = store->create_batch(f->id, "/v1/completions", "1s", {{"a", "{}"}}, 1);
  REQUIRE(e.ok());
  auto late = store->expired(e->created_at + 2);
  REQUIRE(late.ok());
  CHECK(*late == std::vector<std::string>{e->id});
  auto x = store->stop_batch(e->id, true, {});
  REQUIRE(x.ok());
  CHECK((*x)->status == "expired");
  // Files: listed newest first, deleted once no batch reads them.
  auto files = store->files();
  REQUIRE(files.ok());
  CHECK(files->size() == 2);  // the input and the cancelled batch's output (the expired one did nothing)
  auto gone = store->delete_file(f->id);
  REQUIRE(gone.ok());
  CHECK(*gone);
  auto twice = store->delete_file(f->id);
  REQUIRE(twice.ok());
  CHECK_FALSE(*twice);
  std::filesystem::remove_all(dir);
}

TEST_CASE("batch store: a store of an older server gains the new columns", "[serving][batch]") {
  const auto dir = fresh_dir("batch_migrate");
  const auto path = dir / "old.sqlite";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.string().c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "CREATE TABLE batches (id TEXT PRIMARY KEY, input_file_id TEXT NOT NULL, endpoint TEXT NOT "
                       "NULL, completion_window TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL, "
                       "completed_at INTEGER NOT NULL DEFAULT 0, output_file_id TEXT NOT NULL DEFAULT '', "
                       "error_file_id TEXT NOT NULL DEFAULT '', total INTEGER NOT NULL, completed INTEGER NOT NULL "
                       "DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0);"
                       "INSERT INTO batches (id, input_file_id, endpoint, completion_window, status, created_at, total)"
                       " VALUES ('batch_old', 'file-x', '/v1/completions', '24h', 'completed', 5, 1);",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto store = open_store(path);
  auto b = store->batch("batch_old");
  REQUIRE(b.ok());
  REQUIRE(b->has_value());
  CHECK((*b)->status == "completed");
  CHECK((*b)->metadata == "null");
  CHECK((*b)->expires_at == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("batch store: a store that cannot be opened says where", "[serving][batch]") {
  auto s = BatchStore::open("/nonexistent-folder/x/batches.sqlite");
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("batch store /nonexistent-folder/x/batches.sqlite: cannot open") == 0);
}

TEST_CASE("batch store: one server per store, named when refused", "[serving][batch]") {
  const auto dir = fresh_dir("batch_lock");
  const auto path = dir / "batches.sqlite";
  {
    auto first = open_store(path);
    auto second = BatchStore::open(path.string());
    REQUIRE_FALSE(second.ok());
    const std::string why = second.status().message();
    INFO(why);
    CHECK(why.find("batch store " + path.string() + " is in use by another server (pid " + std::to_string(::getpid()) +
                   " on ") == 0);
    CHECK(why.find("one server per store") != std::string::npos);
  }
  auto again = BatchStore::open(path.string());  // the first is gone: its lock with it
  CHECK(again.ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("batch store: a file with another schema is refused at open", "[serving][batch]") {
  const auto dir = fresh_dir("batch_schema");
  const auto path = dir / "foreign.sqlite";
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.string().c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE files (id TEXT, name TEXT);", nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  auto s = BatchStore::open(path.string());
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message() == "batch store " + path.string() +
                                    ": table 'files' has columns (id, name), expected (id, filename, purpose, bytes, "
                                    "created_at, content): not a slicesched batch store (give another file)");
  std::filesystem::remove_all(dir);
}

TEST_CASE("batch runner: a full disk pauses the batch, keeps its results, and never runs a line twice",
          "[serving][batch]") {
  const auto dir = fresh_dir("batch_full");
  auto store = open_store(dir / "batches.sqlite");
  std::vector<BatchLine> lines;
  for (int i = 0; i < 200; ++i) lines.push_back({"r" + std::to_string(i), "{}"});
  auto b = store->create_batch("file-x", "/v1/completions", "24h", lines);
  REQUIRE(b.ok());
  // The disk is full from here: every write that needs a page fails.
  REQUIRE(store->limit_pages(1).ok());

  static const ServedModel model{.name = "m", .vocab = 8};
  RequestInbox inbox;
  std::atomic<int> runs{0};
  std::atomic<bool> engine_stop{false};
  // The engine: every request ends at once with one token.
  std::thread engine([&] {
    while (!engine_stop) {
      for (LiveRequest& r : inbox.take()) {
        ++runs;
        r.sink->on_token(3, 0);
        r.sink->on_end(1, 1, "", 0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  BatchRunner runner(
      *store, inbox,
      [](const std::string&) -> std::variant<Routed, ApiError> {
        return Routed{LiveRequest{0, {1}, 1, nullptr}, &model};
      },
      16);
  runner.start();
  const auto t0 = std::chrono::steady_clock::now();
  while (runner.unwritten() == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(runner.unwritten() > 0);
  CHECK(runner.store_error().find("database or disk is full") != std::string::npos);
  // Paused: 3.5 s later nothing more ran, and the store was tried a few
  // times (back-off 1 s, 2 s), not in a loop.
  const int ran = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  CHECK(runs.load() == ran);
  CHECK(ran <= 32);  // (the lines already running when the first write failed)
  CHECK(runner.failed_writes() >= 2);
  CHECK(runner.failed_writes() <= 4);
  auto during = store->batch(b->id);
  REQUIRE(during.ok());
  CHECK((*during)->status == "in_progress");
  // Room again: the kept results are written, the batch resumes and
  // completes, every line run exactly once.
  REQUIRE(store->limit_pages(0).ok());
  const auto t1 = std::chrono::steady_clock::now();
  for (;;) {
    auto now = store->batch(b->id);
    REQUIRE(now.ok());
    if ((*now)->status == "completed" || std::chrono::steady_clock::now() - t1 > std::chrono::seconds(60)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto done = store->batch(b->id);
  REQUIRE(done.ok());
  CHECK((*done)->status == "completed");
  CHECK((*done)->completed == 200);
  CHECK(runs.load() == 200);
  CHECK(runner.store_error().empty());
  CHECK(runner.stop().ok());
  engine_stop = true;
  engine.join();
  std::filesystem::remove_all(dir);
}
