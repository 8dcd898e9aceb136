// SqlDb over libpq: one connection, opened lazily and re-opened after it breaks.
#include <libpq-fe.h>

#include <mutex>

#include "gateway/sql_db.h"

namespace ts::gateway {
namespace {

// postgresql://user:secret@host/db?password=x -> postgresql://user:***@host/db?password=***
std::string redact(std::string url) {
  for (size_t p = url.find("password="); p != std::string::npos; p = url.find("password=", p + 1)) {
    size_t end = url.find('&', p);
    url = url.substr(0, p + 9) + "***" + (end == std::string::npos ? "" : url.substr(end));
  }
  size_t scheme = url.find("://");
  size_t at = url.rfind('@', url.find('/', scheme == std::string::npos ? 0 : scheme + 3));
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  size_t colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

class PostgresDb final : public SqlDb {
 public:
  explicit PostgresDb(std::string url) : url_(std::move(url)) {}
  ~PostgresDb() override {
    if (conn_) PQfinish(conn_);
  }

  SqlDialect dialect() const override { return SqlDialect::kPostgres; }
  std::string describe() const override { return redact(url_); }

  Result<std::vector<SqlRow>> query(std::string_view sql,
                                    std::span<const SqlParam> params) override {
    std::lock_guard lock(mu_);
    TS_RETURN_IF_ERROR(connect());
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (auto* v = std::get_if<int64_t>(&params[i])) text[i] = std::to_string(*v);
      else text[i] = std::get<std::string>(params[i]);
      values[i] = text[i].c_str();
    }
    std::string s(sql);
    PGresult* res = PQexecParams(conn_, s.c_str(), int(params.size()), nullptr, values.data(),
                                 nullptr, nullptr, 0);
    ExecStatusType est = PQresultStatus(res);
    if (est != PGRES_COMMAND_OK && est != PGRES_TUPLES_OK) {
      Status st = error(res);
      PQclear(res);
      return st;
    }
    std::vector<SqlRow> rows(PQntuples(res));
    int cols = PQnfields(res);
    for (size_t r = 0; r < rows.size(); ++r) {
      rows[r].resize(cols);
      for (int c = 0; c < cols; ++c)
        if (!PQgetisnull(res, int(r), c))
          rows[r][c].assign(PQgetvalue(res, int(r), c), PQgetlength(res, int(r), c));
    }
    PQclear(res);
    return rows;
  }

  Status exec_script(std::string_view sql) override {
    std::lock_guard lock(mu_);
    TS_RETURN_IF_ERROR(connect());
    std::string s(sql);
    PGresult* res = PQexec(conn_, s.c_str());
    Status st = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK
                    ? ok_status()
                    : error(res);
    PQclear(res);
    return st;
  }

 protected:
  void lock() override { mu_.lock(); }
  void unlock() override { mu_.unlock(); }

 private:
  Status connect() {
    if (conn_ && PQstatus(conn_) == CONNECTION_OK) return ok_status();
    if (conn_) PQfinish(conn_);
    // The URL is expanded as dbname; later keywords override it.
    const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
    const char* vals[] = {url_.c_str(), "3", "tokenserve", nullptr};
    conn_ = PQconnectdbParams(keys, vals, 1);
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      std::string msg = conn_ ? PQerrorMessage(conn_) : "out of memory";
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
      if (conn_) PQfinish(conn_);
      conn_ = nullptr;
      return unavailable("postgres " + describe() + ": cannot connect: " + msg);
    }
    PGresult* res = PQexec(conn_, "SET client_min_messages TO warning");
    PQclear(res);
    return ok_status();
  }

  Status error(PGresult* res) {
    std::string msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    msg = "postgres " + describe() + ": " + msg;
    if (PQstatus(conn_) != CONNECTION_OK) {
      PQfinish(conn_);
      conn_ = nullptr;
      return unavailable(msg);
    }
    const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    std::string code = state ? state : "";
    if (code.starts_with("23")) return invalid_argument(msg);  // integrity constraint
    if (code.starts_with("08") || code.starts_with("57") || code.starts_with("53"))
      return unavailable(msg);  // connection / operator intervention / resources
    return internal_error(msg);
  }

  std::string url_;
  std::recursive_mutex mu_;
  PGconn* conn_ = nullptr;
};

}  // namespace

std::unique_ptr<SqlDb> make_postgres_db(std::string url) {
  return std::make_unique<PostgresDb>(std::move(url));
}

}  // namespace ts::gateway
