// SqlDb over SQLite: one connection, WAL journal, a busy timeout so that a CLI process and a
// server can share the file, and a cache of prepared statements.
#include <sqlite3.h>

#include <cstdlib>
#include <map>
#include <vector>
#include <mutex>

#include "gateway/sql_db.h"

namespace ts::gateway {
namespace {

class SqliteDb final : public SqlDb {
 public:
  explicit SqliteDb(std::string path) : path_(std::move(path)) {}
  ~SqliteDb() override { close(); }

  SqlDialect dialect() const override { return SqlDialect::kSqlite; }
  std::string describe() const override { return "sqlite:" + path_; }

  Result<std::vector<SqlRow>> query(std::string_view sql,
                                    std::span<const SqlParam> params) override {
    std::lock_guard lock(mu_);
    TS_RETURN_IF_ERROR(connect());
    auto it = stmts_.find(sql);  // no key copy per call (a writer runs one statement per row)
    if (it == stmts_.end()) {
      sqlite3_stmt* prepared = nullptr;
      if (sqlite3_prepare_v2(db_, sql.data(), int(sql.size()), &prepared, nullptr) != SQLITE_OK)
        return error(sqlite3_extended_errcode(db_), "prepare");
      // "$N" -> SQLite's slot, looked up once per statement rather than by name per parameter
      // and row (that lookup was ~8 % of the ledger writer's time).
      Prepared p{.stmt = prepared};
      for (int slot = 1; slot <= sqlite3_bind_parameter_count(prepared); ++slot) {
        const char* name = sqlite3_bind_parameter_name(prepared, slot);
        if (!name || name[0] != '$') continue;
        char* end = nullptr;
        long n = std::strtol(name + 1, &end, 10);
        if (*end != '\0' || n < 1 || n > 999) continue;
        if (p.slot.size() < size_t(n)) p.slot.resize(size_t(n), 0);
        p.slot[size_t(n - 1)] = slot;
      }
      it = stmts_.emplace(std::string(sql), std::move(p)).first;
    }
    sqlite3_stmt* stmt = it->second.stmt;
    const std::vector<int>& slots = it->second.slot;
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    for (size_t i = 0; i < params.size(); ++i) {
      int idx = i < slots.size() ? slots[i] : 0;
      if (idx == 0) continue;  // parameter not used by this statement
      if (auto* v = std::get_if<int64_t>(&params[i])) {
        sqlite3_bind_int64(stmt, idx, *v);
      } else {
        const auto& s = std::get<std::string>(params[i]);
        sqlite3_bind_text(stmt, idx, s.data(), int(s.size()), SQLITE_TRANSIENT);
      }
    }
    std::vector<SqlRow> rows;
    for (;;) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        Status st = error(rc, "step");
        sqlite3_reset(stmt);
        return st;
      }
      int n = sqlite3_column_count(stmt);
      SqlRow row(n);
      for (int c = 0; c < n; ++c) {
        const unsigned char* t = sqlite3_column_text(stmt, c);
        if (t) row[c].assign(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt, c));
      }
      rows.push_back(std::move(row));
    }
    sqlite3_reset(stmt);
    return rows;
  }

  Status exec_script(std::string_view sql) override {
    std::lock_guard lock(mu_);
    TS_RETURN_IF_ERROR(connect());
    char* err = nullptr;
    std::string s(sql);
    if (sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return internal_error("sqlite " + path_ + ": " + msg);
    }
    return ok_status();
  }

 protected:
  void lock() override { mu_.lock(); }
  void unlock() override { mu_.unlock(); }

 private:
  Status connect() {
    if (db_) return ok_status();
    sqlite3* db = nullptr;
    int rc = sqlite3_open_v2(path_.c_str(), &db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
      sqlite3_close(db);
      return unavailable("sqlite " + path_ + ": cannot open: " + msg);
    }
    sqlite3_busy_timeout(db, 5000);
    char* err = nullptr;
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", nullptr,
                      nullptr, &err);
    if (rc != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      sqlite3_close(db);
      return unavailable("sqlite " + path_ + ": " + msg);
    }
    db_ = db;
    return ok_status();
  }

  void close() {
    for (auto& [sql, p] : stmts_) sqlite3_finalize(p.stmt);
    stmts_.clear();
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
  }

  Status error(int rc, const char* what) {
    std::string msg = "sqlite " + path_ + ": " + what + ": " + sqlite3_errmsg(db_);
    int primary = rc & 0xff;
    if (primary == SQLITE_CONSTRAINT) return invalid_argument(msg);
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED || primary == SQLITE_IOERR ||
        primary == SQLITE_CANTOPEN || primary == SQLITE_FULL) {
      return unavailable(msg);
    }
    return internal_error(msg);
  }

  std::string path_;
  std::recursive_mutex mu_;
  sqlite3* db_ = nullptr;
  struct Prepared {
    sqlite3_stmt* stmt = nullptr;
    std::vector<int> slot;  // [N-1] = the bind slot of "$N" (0 = not in the statement)
  };
  std::map<std::string, Prepared, std::less<>> stmts_;
};

}  // namespace

std::unique_ptr<SqlDb> make_sqlite_db(std::string path) {
  return std::make_unique<SqliteDb>(std::move(path));
}

}  // namespace ts::gateway
