// A minimal SQL connection shared by the ledger and key stores, with two implementations:
// SQLite (a file in WAL mode; the embedded default) and PostgreSQL (libpq). Statements use
// `$1, $2, ...` placeholders in both; values travel as text or int64 and come back as text.
//
// Connections are lazy and self-healing: a failed open or a broken connection makes the call
// return kUnavailable, and the next call tries to connect again. That is what lets the ledger
// writer keep records spooled while a database is briefly unreachable.
//
// Thread-safe: every call holds the connection's (recursive) mutex, so a transaction's
// statements are never interleaved with another thread's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace ts::gateway {

using SqlParam = std::variant<int64_t, std::string>;
using SqlRow = std::vector<std::string>;  // column values as text; NULL reads as ""

enum class SqlDialect { kSqlite, kPostgres };

class SqlDb {
 public:
  virtual ~SqlDb() = default;
  virtual SqlDialect dialect() const = 0;
  // Where it points, with any password removed (for logs).
  virtual std::string describe() const = 0;

  // Runs one statement. kUnavailable when the database cannot be reached (retry later),
  // kInternal for SQL errors (a bug or a schema mismatch), kInvalidArgument for constraint
  // violations.
  virtual Result<std::vector<SqlRow>> query(std::string_view sql,
                                            std::span<const SqlParam> params = {}) = 0;
  Status exec(std::string_view sql, std::span<const SqlParam> params = {}) {
    return query(sql, params).status();
  }
  // Several `;`-separated statements without parameters (schema set-up).
  virtual Status exec_script(std::string_view sql) = 0;
  // Runs `body` between BEGIN and COMMIT; rolls back when it fails (its Status is returned) or
  // when COMMIT fails. Nothing of a failed transaction is visible afterwards.
  Status transaction(const std::function<Status()>& body);

 protected:
  virtual void lock() = 0;
  virtual void unlock() = 0;
};

// True for "postgresql://..." and "postgres://..." URLs.
bool is_postgres_url(std::string_view url);

// Opens `url`: a postgresql:// URL, or else a SQLite file path (created if missing; its
// directory must exist). Never fails for an unreachable database: the connection is made on
// first use. kInvalidArgument only for an empty location.
Result<std::unique_ptr<SqlDb>> open_sql_db(const std::string& url);

std::unique_ptr<SqlDb> make_sqlite_db(std::string path);
std::unique_ptr<SqlDb> make_postgres_db(std::string url);

}  // namespace ts::gateway
