#include "gateway/sql_db.h"

namespace ts::gateway {

Status SqlDb::transaction(const std::function<Status()>& body) {
  lock();
  Status st = exec("BEGIN");
  if (st.ok()) {
    st = body();
    if (st.ok()) st = exec("COMMIT");
    if (!st.ok()) (void)exec("ROLLBACK");
  }
  unlock();
  return st;
}

bool is_postgres_url(std::string_view url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

Result<std::unique_ptr<SqlDb>> open_sql_db(const std::string& url) {
  if (url.empty()) return invalid_argument("empty ledger location");
  if (is_postgres_url(url)) return make_postgres_db(url);
  return make_sqlite_db(url);
}

}  // namespace ts::gateway
