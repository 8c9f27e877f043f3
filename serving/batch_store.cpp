module;
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

module slicesched.serving.batch_store;

namespace slicesched::serving {

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "prefix-" and 24 random hex digits: ids a client cannot guess or collide.
std::string new_id(const char* prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lk(mu);
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() % 16];
  return id;
}

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& blob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& integer(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // SQLITE_ROW or SQLITE_DONE, else an error code.
  int step() { return sqlite3_step(s_); }
  std::string col_text(int i) const {
    const auto* p = sqlite3_column_text(s_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s_, i)))
             : std::string();
  }
  std::string col_blob(int i) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s_, i));
    return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  std::int64_t col_int(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS files (
  id TEXT PRIMARY KEY, filename TEXT NOT NULL, purpose TEXT NOT NULL,
  bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, content BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
  id TEXT PRIMARY KEY, input_file_id TEXT NOT NULL, endpoint TEXT NOT NULL, completion_window TEXT NOT NULL,
  status TEXT NOT NULL, created_at INTEGER NOT NULL, completed_at INTEGER NOT NULL DEFAULT 0,
  output_file_id TEXT NOT NULL DEFAULT '', error_file_id TEXT NOT NULL DEFAULT '',
  total INTEGER NOT NULL, completed INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
  metadata TEXT NOT NULL DEFAULT 'null', expires_at INTEGER NOT NULL DEFAULT 0, ended_at INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS lines (
  batch_id TEXT NOT NULL, line INTEGER NOT NULL, custom_id TEXT NOT NULL, body TEXT NOT NULL,
  state TEXT NOT NULL, result TEXT NOT NULL DEFAULT '', PRIMARY KEY (batch_id, line));
CREATE INDEX IF NOT EXISTS lines_pending ON lines (state);
)";

BatchInfo read_batch(const Stmt& s) {
  BatchInfo b;
  b.id = s.col_text(0);
  b.input_file_id = s.col_text(1);
  b.endpoint = s.col_text(2);
  b.completion_window = s.col_text(3);
  b.status = s.col_text(4);
  b.created_at = s.col_int(5);
  b.completed_at = s.col_int(6);
  b.output_file_id = s.col_text(7);
  b.error_file_id = s.col_text(8);
  b.total = s.col_int(9);
  b.completed = s.col_int(10);
  b.failed = s.col_int(11);
  b.metadata = s.col_text(12);
  b.expires_at = s.col_int(13);
  b.ended_at = s.col_int(14);
  return b;
}

constexpr const char* kBatchColumns =
    "SELECT id, input_file_id, endpoint, completion_window, status, created_at, completed_at, output_file_id, "
    "error_file_id, total, completed, failed, metadata, expires_at, ended_at FROM batches";

// The batches table before metadata, expires_at and ended_at (a store made
// by an older server): those columns are added when it is opened.
const std::vector<std::string> kBatchesBefore28 = {
    "id",         "input_file_id", "endpoint",       "completion_window", "status",
    "created_at", "completed_at",  "output_file_id", "error_file_id",     "total",
    "completed",  "failed"};

}  // namespace

Status BatchStore::error(const std::string& what) const {
  return Internal("batch store " + path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "not open"));
}

Status BatchStore::rollback(const std::string& what) {
  Status e = error(what);  // (before ROLLBACK replaces SQLite's message)
  (void)exec("ROLLBACK;");
  return e;
}

Status BatchStore::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : "unknown error";
    sqlite3_free(msg);
    return Internal("batch store " + path_ + ": " + m);
  }
  return Status::Ok();
}

// Each table's columns, in order, as kSchema makes them.
const std::vector<std::pair<std::string, std::vector<std::string>>>& expected_tables() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> t{
      {"files", {"id", "filename", "purpose", "bytes", "created_at", "content"}},
      {"batches",
       {"id", "input_file_id", "endpoint", "completion_window", "status", "created_at", "completed_at",
        "output_file_id", "error_file_id", "total", "completed", "failed", "metadata", "expires_at", "ended_at"}},
      {"lines", {"batch_id", "line", "custom_id", "body", "state", "result"}}};
  return t;
}

Status BatchStore::check_schema(bool allow_missing) {
  for (const auto& [table, want] : expected_tables()) {
    Stmt s(db_, ("PRAGMA table_info(" + table + ")").c_str());
    if (!s.ok()) return error("reading the schema");
    std::vector<std::string> got;
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) got.push_back(s.col_text(1));
    if (rc != SQLITE_DONE) return error("reading the schema");
    if (got.empty() && allow_missing) continue;  // (made next)
    if (got != want) {
      auto list = [](const std::vector<std::string>& v) {
        std::string o;
        for (const auto& c : v) o += (o.empty() ? "" : ", ") + c;
        return o;
      };
      return FailedPrecondition("batch store " + path_ + ": table '" + table + "' has columns (" + list(got) +
                                "), expected (" + list(want) + "): not a slicesched batch store (give another file)");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<BatchStore>> BatchStore::open(const std::string& path) {
  std::unique_ptr<BatchStore> s(new BatchStore(path));
  // One server per store: an exclusive lock on a file beside it, which
  // names its holder.
  const std::string lock = path + ".lock";
  s->lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (s->lock_fd_ < 0)
    return FailedPrecondition("batch store " + path + ": cannot open (its lock file " + lock + ": " +
                              std::strerror(errno) + ")");
  if (flock(s->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder(256, '\0');
    const ssize_t n = pread(s->lock_fd_, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    return FailedPrecondition("batch store " + path + " is in use by another server (" +
                              (holder.empty() ? std::string("its holder is unnamed") : holder) +
                              "); one server per store: stop that one first, or give another --batch-store");
  }
  {
    char host[128] = "?";
    (void)gethostname(host, sizeof host - 1);
    const std::string me =
        "pid " + std::to_string(getpid()) + " on " + host + ", since unix time " + std::to_string(unix_now()) + "\n";
    (void)ftruncate(s->lock_fd_, 0);
    (void)pwrite(s->lock_fd_, me.data(), me.size(), 0);
  }
  if (sqlite3_open_v2(path.c_str(), &s->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK)
    return s->error("cannot open");
  sqlite3_busy_timeout(s->db_, 5000);
  // WAL with full sync: a result acknowledged by commit survives a crash
  // or power loss.
  // A store of an older server gains the batches' new columns.
  {
    Stmt t(s->db_, "PRAGMA table_info(batches)");
    if (!t.ok()) return s->error("reading the schema");
    std::vector<std::string> got;
    while (t.step() == SQLITE_ROW) got.push_back(t.col_text(1));
    if (got == kBatchesBefore28)
      for (const char* sql : {"ALTER TABLE batches ADD COLUMN metadata TEXT NOT NULL DEFAULT 'null';",
                              "ALTER TABLE batches ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;",
                              "ALTER TABLE batches ADD COLUMN ended_at INTEGER NOT NULL DEFAULT 0;"})
        if (Status st = s->exec(sql); !st.ok()) return st;
  }
  // The tables there must be a batch store's before anything is added.
  if (Status st = s->check_schema(true); !st.ok()) return st;
  for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;", kSchema})
    if (Status st = s->exec(sql); !st.ok()) return st;
  if (Status st = s->check_schema(false); !st.ok()) return st;
  return s;
}

BatchStore::~BatchStore() {
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // (the lock goes with it)
}

Status BatchStore::limit_pages(std::int64_t pages) {
  std::lock_guard lk(mu_);
  if (pages == 0) return exec("PRAGMA max_page_count = 4294967294;");
  return exec(("PRAGMA max_page_count = " + std::to_string(pages) + ";").c_str());
}

Result<FileInfo> BatchStore::add_file(const std::string& filename, const std::string& purpose,
                                      const std::string& content) {
  std::lock_guard lk(mu_);
  FileInfo f{new_id("file-"), filename, purpose, static_cast<std::int64_t>(content.size()), unix_now()};
  Stmt s(db_, "INSERT INTO files (id, filename, purpose, bytes, created_at, content) VALUES (?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return error("add_file");
  s.text(1, f.id).text(2, f.filename).text(3, f.purpose).integer(4, f.bytes).integer(5, f.created_at).blob(6, content);
  if (s.step() != SQLITE_DONE) return error("add_file");
  return f;
}

Result<std::optional<FileInfo>> BatchStore::file(const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt s(db_, "SELECT id, filename, purpose, bytes, created_at FROM files WHERE id = ?");
  if (!s.ok()) return error("file");
  s.text(1, id);
  const int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<FileInfo>();
  if (rc != SQLITE_ROW) return error("file");
  return std::optional<FileInfo>(FileInfo{s.col_text(0), s.col_text(1), s.col_text(2), s.col_int(3), s.col_int(4)});
}

Result<std::vector<FileInfo>> BatchStore::files() {
  std::lock_guard lk(mu_);
  Stmt s(db_, "SELECT id, filename, purpose, bytes, created_at FROM files ORDER BY created_at DESC, rowid DESC");
  if (!s.ok()) return error("files");
  std::vector<FileInfo> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW)
    out.push_back(FileInfo{s.col_text(0), s.col_text(1), s.col_text(2), s.col_int(3), s.col_int(4)});
  if (rc != SQLITE_DONE) return error("files");
  return out;
}

Result<bool> BatchStore::delete_file(const std::string& id) {
  std::lock_guard lk(mu_);
  {
    Stmt busy(db_, "SELECT id FROM batches WHERE input_file_id = ? AND status = 'in_progress' LIMIT 1");
    if (!busy.ok()) return error("delete file");
    busy.text(1, id);
    const int rc = busy.step();
    if (rc == SQLITE_ROW)
      return FailedPrecondition("file '" + id + "' is the input of batch '" + busy.col_text(0) +
                                "', still in progress; delete it once the batch ends");
    if (rc != SQLITE_DONE) return error("delete file");
  }
  Stmt s(db_, "DELETE FROM files WHERE id = ?");
  if (!s.ok()) return error("delete file");
  s.text(1, id);
  if (s.step() != SQLITE_DONE) return error("delete file");
  return sqlite3_changes(db_) > 0;
}

Result<std::optional<std::string>> BatchStore::file_content(const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt s(db_, "SELECT content FROM files WHERE id = ?");
  if (!s.ok()) return error("file_content");
  s.text(1, id);
  const int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return error("file_content");
  return std::optional<std::string>(s.col_blob(0));
}

Result<BatchInfo> BatchStore::create_batch(const std::string& input_file_id, const std::string& endpoint,
                                           const std::string& window, const std::vector<BatchLine>& lines,
                                           std::int64_t window_s, const std::string& metadata) {
  std::lock_guard lk(mu_);
  BatchInfo b;
  b.metadata = metadata;
  b.id = new_id("batch_");
  b.input_file_id = input_file_id;
  b.endpoint = endpoint;
  b.completion_window = window;
  b.status = "in_progress";
  b.created_at = unix_now();
  b.expires_at = b.created_at + window_s;
  b.total = static_cast<std::int64_t>(lines.size());
  if (Status st = exec("BEGIN IMMEDIATE;"); !st.ok()) return st;
  {
    Stmt s(db_,
           "INSERT INTO batches (id, input_file_id, endpoint, completion_window, status, created_at, total, "
           "metadata, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!s.ok()) return rollback("create_batch");
    s.text(1, b.id).text(2, input_file_id).text(3, endpoint).text(4, window).text(5, b.status);
    s.integer(6, b.created_at).integer(7, b.total).text(8, metadata).integer(9, b.expires_at);
    if (s.step() != SQLITE_DONE) return rollback("create_batch");
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    Stmt s(db_, "INSERT INTO lines (batch_id, line, custom_id, body, state) VALUES (?, ?, ?, ?, 'pending')");
    if (!s.ok()) return rollback("create_batch");
    s.text(1, b.id).integer(2, static_cast<std::int64_t>(i + 1)).text(3, lines[i].custom_id).text(4, lines[i].body);
    if (s.step() != SQLITE_DONE) return rollback("create_batch");
  }
  if (Status st = exec("COMMIT;"); !st.ok()) return rollback("create_batch");
  return b;
}

Result<std::optional<BatchInfo>> BatchStore::batch(const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt s(db_, (std::string(kBatchColumns) + " WHERE id = ?").c_str());
  if (!s.ok()) return error("batch");
  s.text(1, id);
  const int rc = s.step();
  if (rc == SQLITE_DONE) return std::optional<BatchInfo>();
  if (rc != SQLITE_ROW) return error("batch");
  return std::optional<BatchInfo>(read_batch(s));
}

Result<std::vector<BatchInfo>> BatchStore::batches() {
  std::lock_guard lk(mu_);
  Stmt s(db_, (std::string(kBatchColumns) + " ORDER BY created_at DESC, rowid DESC").c_str());
  if (!s.ok()) return error("batches");
  std::vector<BatchInfo> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(read_batch(s));
  if (rc != SQLITE_DONE) return error("batches");
  return out;
}

Result<std::vector<PendingLine>> BatchStore::pending(std::size_t limit,
                                                     const std::set<std::pair<std::string, std::int64_t>>& skip) {
  std::lock_guard lk(mu_);
  Stmt s(db_, "SELECT batch_id, line, custom_id, body FROM lines WHERE state = 'pending' ORDER BY rowid LIMIT ?");
  if (!s.ok()) return error("pending");
  s.integer(1, static_cast<std::int64_t>(limit + skip.size()));
  std::vector<PendingLine> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW && out.size() < limit) {
    PendingLine p{s.col_text(0), s.col_int(1), s.col_text(2), s.col_text(3)};
    if (!skip.contains({p.batch_id, p.line})) out.push_back(std::move(p));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return error("pending");
  return out;
}

Status BatchStore::finish_line(const std::string& batch_id, std::int64_t line, bool ok, const std::string& result) {
  std::lock_guard lk(mu_);
  if (Status st = exec("BEGIN IMMEDIATE;"); !st.ok()) return st;
  {
    Stmt s(db_, "UPDATE lines SET state = ?, result = ? WHERE batch_id = ? AND line = ? AND state = 'pending'");
    if (!s.ok()) return rollback("finish_line");
    s.text(1, ok ? "done" : "failed").text(2, result).text(3, batch_id).integer(4, line);
    if (s.step() != SQLITE_DONE) return rollback("finish_line");
  }
  if (sqlite3_changes(db_) == 0) return exec("COMMIT;");  // already answered
  {
    Stmt s(db_, ok ? "UPDATE batches SET completed = completed + 1 WHERE id = ?"
                   : "UPDATE batches SET failed = failed + 1 WHERE id = ?");
    if (!s.ok()) return rollback("finish_line");
    s.text(1, batch_id);
    if (s.step() != SQLITE_DONE) return rollback("finish_line");
  }
  std::int64_t left = 0;
  {
    Stmt s(db_, "SELECT COUNT(*) FROM lines WHERE batch_id = ? AND state = 'pending'");
    if (!s.ok()) return rollback("finish_line");
    s.text(1, batch_id);
    if (s.step() != SQLITE_ROW) return rollback("finish_line");
    left = s.col_int(0);
  }
  if (left == 0) {
    if (Status st = finalize(batch_id); !st.ok()) {
      (void)exec("ROLLBACK;");
      return st;
    }
  }
  return exec("COMMIT;");
}

// (In a transaction.) The batch's last line is answered or given up: the
// output file (done lines) and error file (failed ones), in input order,
// and its final status: completed, or cancelled / expired when it was
// cancelling / expiring.
Status BatchStore::finalize(const std::string& batch_id) {
  std::string output, errors, status;
  {
    Stmt s(db_, "SELECT status FROM batches WHERE id = ?");
    if (!s.ok()) return error("finalize");
    s.text(1, batch_id);
    if (s.step() != SQLITE_ROW) return error("finalize");
    status = s.col_text(0);
  }
  const std::string final_status = status == "cancelling" ? "cancelled"
                                   : status == "expiring" ? "expired"
                                                          : "completed";
  {
    Stmt s(db_, "SELECT state, result FROM lines WHERE batch_id = ? ORDER BY line");
    if (!s.ok()) return error("finalize");
    s.text(1, batch_id);
    int rc;
    while ((rc = s.step()) == SQLITE_ROW) {
      const std::string state = s.col_text(0);
      if (state == "done") output += s.col_text(1) + "\n";
      if (state == "failed") errors += s.col_text(1) + "\n";
    }
    if (rc != SQLITE_DONE) return error("finalize");
  }
  const std::int64_t now = unix_now();
  std::string out_id = output.empty() && final_status != "completed" ? std::string() : new_id("file-");
  std::string err_id = errors.empty() ? std::string() : new_id("file-");
  for (const auto& [id, content, purpose] :
       {std::tuple{out_id, output, "batch_output"}, std::tuple{err_id, errors, "batch_error"}}) {
    if (id.empty()) continue;
    Stmt s(db_, "INSERT INTO files (id, filename, purpose, bytes, created_at, content) VALUES (?, ?, ?, ?, ?, ?)");
    if (!s.ok()) return error("finalize");
    s.text(1, id).text(2, batch_id + (std::string(purpose) == "batch_output" ? "_output.jsonl" : "_error.jsonl"));
    s.text(3, purpose).integer(4, static_cast<std::int64_t>(content.size())).integer(5, now).blob(6, content);
    if (s.step() != SQLITE_DONE) return error("finalize");
  }
  Stmt s(db_,
         "UPDATE batches SET status = ?, completed_at = ?, ended_at = ?, output_file_id = ?, error_file_id = ? "
         "WHERE id = ?");
  if (!s.ok()) return error("finalize");
  s.text(1, final_status).integer(2, final_status == "completed" ? now : 0).integer(3, now).text(4, out_id);
  s.text(5, err_id).text(6, batch_id);
  if (s.step() != SQLITE_DONE) return error("finalize");
  return Status::Ok();
}

Result<std::optional<BatchInfo>> BatchStore::stop_batch(const std::string& id, bool expire,
                                                        const std::set<std::pair<std::string, std::int64_t>>& running) {
  std::lock_guard lk(mu_);
  if (Status st = exec("BEGIN IMMEDIATE;"); !st.ok()) return st;
  std::string status;
  {
    Stmt s(db_, "SELECT status FROM batches WHERE id = ?");
    if (!s.ok()) return rollback("cancel");
    s.text(1, id);
    const int rc = s.step();
    if (rc == SQLITE_DONE) {
      (void)exec("ROLLBACK;");
      return std::optional<BatchInfo>();
    }
    if (rc != SQLITE_ROW) return rollback("cancel");
    status = s.col_text(0);
  }
  if (status == "in_progress") {
    // Lines not started are given up now; those in the engine finish (their
    // results are kept), and the batch ends with the last of them.
    std::vector<std::int64_t> drop;
    {
      Stmt s(db_, "SELECT line FROM lines WHERE batch_id = ? AND state = 'pending'");
      if (!s.ok()) return rollback("cancel");
      s.text(1, id);
      while (s.step() == SQLITE_ROW)
        if (!running.contains({id, s.col_int(0)})) drop.push_back(s.col_int(0));
    }
    for (std::int64_t line : drop) {
      Stmt s(db_, "UPDATE lines SET state = ? WHERE batch_id = ? AND line = ?");
      if (!s.ok()) return rollback("cancel");
      s.text(1, expire ? "expired" : "cancelled").text(2, id).integer(3, line);
      if (s.step() != SQLITE_DONE) return rollback("cancel");
    }
    {
      Stmt s(db_, "UPDATE batches SET status = ? WHERE id = ?");
      if (!s.ok()) return rollback("cancel");
      s.text(1, expire ? "expiring" : "cancelling").text(2, id);
      if (s.step() != SQLITE_DONE) return rollback("cancel");
    }
    std::int64_t left = 0;
    {
      Stmt s(db_, "SELECT COUNT(*) FROM lines WHERE batch_id = ? AND state = 'pending'");
      if (!s.ok() || (s.text(1, id), s.step()) != SQLITE_ROW) return rollback("cancel");
      left = s.col_int(0);
    }
    if (left == 0)
      if (Status st = finalize(id); !st.ok()) {
        (void)exec("ROLLBACK;");
        return st;
      }
  }
  if (Status st = exec("COMMIT;"); !st.ok()) return rollback("cancel");
  Stmt s(db_, (std::string(kBatchColumns) + " WHERE id = ?").c_str());
  if (!s.ok()) return error("cancel");
  s.text(1, id);
  if (s.step() != SQLITE_ROW) return error("cancel");
  return std::optional<BatchInfo>(read_batch(s));
}

Result<std::vector<std::string>> BatchStore::expired(std::int64_t now) {
  std::lock_guard lk(mu_);
  Stmt s(db_, "SELECT id FROM batches WHERE status = 'in_progress' AND expires_at > 0 AND expires_at <= ?");
  if (!s.ok()) return error("expired");
  s.integer(1, now);
  std::vector<std::string> out;
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) out.push_back(s.col_text(0));
  if (rc != SQLITE_DONE) return error("expired");
  return out;
}

}  // namespace slicesched::serving
