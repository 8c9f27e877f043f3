// The batch API's durable state, in one SQLite file: uploaded files, batches,
// and every request line of every batch with its result. A line is pending
// until its result is written, in the same transaction that counts it, so a
// server killed at any instant restarts with every accepted line either
// answered or still pending (and run again): nothing accepted is lost.
//
// Threading: every method is thread-safe (one connection behind a mutex).
// Failure: SQLite errors come back as Status with the file's path.
module;
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

export module slicesched.serving.batch_store;
import slicesched.core.status;

export namespace slicesched::serving {

struct FileInfo {
  std::string id, filename, purpose;  // purpose: "batch" (uploaded), "batch_output" or "batch_error" (written)
  std::int64_t bytes = 0, created_at = 0;
};

// A batch as GET /v1/batches/{id} shows it. status: "in_progress" until its
// last line has a result, then "completed"; "cancelling" then "cancelled"
// (POST /v1/batches/{id}/cancel), "expiring" then "expired" (past
// expires_at): the lines not started are given up, those in the engine
// finish and their results are in the output file.
struct BatchInfo {
  std::string id, input_file_id, endpoint, completion_window, status;
  std::string output_file_id, error_file_id;  // once ended (error file: when a line failed)
  std::int64_t created_at = 0, completed_at = 0;
  std::int64_t total = 0, completed = 0, failed = 0;
  std::string metadata = "null";  // the client's metadata object, as JSON text
  std::int64_t expires_at = 0;    // created_at + the completion window (0: a store's batch from before)
  std::int64_t ended_at = 0;      // when it was completed, cancelled or expired
};

// One request line of a batch: its custom_id and its completion request body
// (JSON text, validated when the batch was created).
struct BatchLine {
  std::string custom_id, body;
};

struct PendingLine {
  std::string batch_id;
  std::int64_t line = 0;  // 1-based, as in the input file
  std::string custom_id, body;
};

class BatchStore {
 public:
  // Opens (creating) the store at `path`; its folder must exist. One server
  // per store: the store is held by an exclusive lock on `path`.lock (the
  // kernel's, so it goes with the process, even on kill -9) that names its
  // holder, and a second open while it is held is refused naming that
  // holder. A file whose tables are not a batch store's (other columns) is
  // refused, naming the table and the columns expected.
  static Result<std::unique_ptr<BatchStore>> open(const std::string& path);
  ~BatchStore();
  BatchStore(const BatchStore&) = delete;
  BatchStore& operator=(const BatchStore&) = delete;

  Result<FileInfo> add_file(const std::string& filename, const std::string& purpose, const std::string& content);
  Result<std::optional<FileInfo>> file(const std::string& id);
  Result<std::optional<std::string>> file_content(const std::string& id);
  // Every file, newest first.
  Result<std::vector<FileInfo>> files();
  // Deletes file `id`: true when it was there. A batch input file that an
  // unfinished batch still reads is refused (FailedPrecondition naming it).
  Result<bool> delete_file(const std::string& id);
  // Creates an in_progress batch over `lines` (all pending; not empty), atomically.
  // `window_s`: the completion window in seconds (expires_at is
  // created_at plus it); `metadata`: JSON text kept as given.
  Result<BatchInfo> create_batch(const std::string& input_file_id, const std::string& endpoint,
                                 const std::string& window, const std::vector<BatchLine>& lines,
                                 std::int64_t window_s = 24 * 3600, const std::string& metadata = "null");
  // Cancels (or, `expire`, expires) batch `id` if in progress: its pending
  // lines not in `running` (in the engine now) are given up, its status
  // becomes cancelling (expiring), and once no line is pending (now, or
  // when the last running one is answered) it ends as cancelled (expired)
  // with the results so far in its output file. Nothing when there is no
  // such batch; a batch already ended is left as it is.
  Result<std::optional<BatchInfo>> stop_batch(const std::string& id, bool expire,
                                              const std::set<std::pair<std::string, std::int64_t>>& running);
  // In-progress batches whose expires_at has passed at `now`.
  Result<std::vector<std::string>> expired(std::int64_t now);
  Result<std::optional<BatchInfo>> batch(const std::string& id);
  Result<std::vector<BatchInfo>> batches();
  // Up to `limit` pending lines in creation order, leaving out those in
  // `skip` (batch id, line): the ones already running.
  Result<std::vector<PendingLine>> pending(std::size_t limit,
                                           const std::set<std::pair<std::string, std::int64_t>>& skip);
  // Stores a line's result (`result`: the output file's JSON line) and, when
  // it was the batch's last pending line, writes the output file (and the
  // error file when a line failed) and completes the batch: one transaction.
  // A line that already has a result is left as it is.
  Status finish_line(const std::string& batch_id, std::int64_t line, bool ok, const std::string& result);

  // Tests: bounds the database at `pages` pages (SQLite's max_page_count),
  // past which every write fails with "database or disk is full", as on a
  // full disk; 0 lifts the bound.
  Status limit_pages(std::int64_t pages);

 private:
  explicit BatchStore(std::string path) : path_(std::move(path)) {}
  Status exec(const char* sql);
  Status error(const std::string& what) const;
  // error(what), then the open transaction rolled back.
  Status rollback(const std::string& what);
  Status check_schema(bool allow_missing);
  Status finalize(const std::string& batch_id);  // under mu_, in a transaction

  std::string path_;
  sqlite3* db_ = nullptr;
  int lock_fd_ = -1;
  std::mutex mu_;
};

}  // namespace slicesched::serving
