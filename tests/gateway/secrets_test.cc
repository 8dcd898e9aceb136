// Secrets from environment variables and files: the admin key (key_env / key_file), the ledger
// and limit-store URLs with their passwords (url_env / url_file). None of them may appear in
// logs, error messages or descriptions, even while every backend is failing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "gateway/governor.h"
#include "gateway/sha256.h"
#include "test_util.h"

namespace ts::gateway {
namespace {

constexpr const char* kAdminSecret = "admin-s3cr3t-A1";
constexpr const char* kPgSecret = "pg-s3cr3t-B2";
constexpr const char* kRedisSecret = "redis-s3cr3t-C3";

// Captures everything written to stderr (where log lines go) between start() and stop().
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {}
  void start() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  std::string stop() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    return ::ts::testing::read_file(path_);
  }

 private:
  std::string path_;
  int saved_ = -1;
};

void expect_no_secret(const std::string& text, const std::string& where) {
  for (const char* s : {kAdminSecret, kPgSecret, kRedisSecret})
    EXPECT_EQ(text.find(s), std::string::npos) << "secret '" << s << "' leaked in " << where << ":\n" << text;
}

TEST(Secrets, FromEnvAndFilesAndNeverLogged) {
  std::string dir = ::ts::testing::temp_dir();
  ::setenv("TS_TEST_ADMIN_KEY", kAdminSecret, 1);
  ::setenv("TS_TEST_LEDGER_URL",
           (std::string("postgresql://tokenserve:") + kPgSecret + "@127.0.0.1:1/ledger").c_str(), 1);
  std::ofstream(dir + "/redis-url") << "redis://:" << kRedisSecret << "@127.0.0.1:1\n";
  std::ofstream(dir + "/gov.toml") << "[admin]\nkey_env = \"TS_TEST_ADMIN_KEY\"\n"
                                   << "[ledger]\nurl_env = \"TS_TEST_LEDGER_URL\"\n"
                                   << "[limits]\nurl_file = \"" << dir << "/redis-url\"\n"
                                   << "[tenants.anonymous]\nrpm = 100\nquota = { tokens = 1000, period = \"day\" }\n";
  StderrCapture cap(dir + "/stderr.txt");
  cap.start();
  std::string messages;
  {
    auto gov = Governor::open({.ledger = "ignored.db", .config_path = dir + "/gov.toml", .no_auth = true,
                               .writer = {.retry_initial = Millis(5), .spill_path = dir + "/spool"}});
    ASSERT_TRUE(gov.ok()) << gov.status().to_string();
    EXPECT_TRUE((*gov)->is_admin(std::string("Bearer ") + kAdminSecret));
    EXPECT_FALSE((*gov)->is_admin("Bearer something-else"));
    EXPECT_NE((*gov)->ledger()->describe().find("***"), std::string::npos) << (*gov)->ledger()->describe();
    messages += (*gov)->ledger()->describe() + "\n";
    // Every backend is down: admissions fail open, rows spool, everything is logged.
    for (int i = 0; i < 5; ++i) {
      AdmitResult r = (*gov)->admit({.model = "m", .prompt_tokens = 3, .max_tokens = 3});
      ASSERT_TRUE(r.ok()) << r.status.to_string();
      (*gov)->settle(*r.admission, {.request_id = "s" + std::to_string(i), .prompt_tokens = 3});
    }
    (void)(*gov)->writer()->flush(Millis(100));
    GovernorStats st = (*gov)->stats();
    messages += st.ledger.last_error + "\n";
    EXPECT_FALSE(st.ledger.last_error.empty());
    auto me = (*gov)->usage_me("");
    if (!me.ok()) messages += me.status().message() + "\n";
    EXPECT_TRUE((*gov)->shutdown(Millis(50)).ok());
  }
  auto bad_url = make_redis_limit_store({.url = std::string("redis://:") + kRedisSecret + "@host:notaport"});
  ASSERT_FALSE(bad_url.ok());
  messages += bad_url.status().message() + "\n";
  auto bad_pg = open_sql_db(std::string("postgresql://u@127.0.0.1:1/db?password=") + kPgSecret);
  ASSERT_TRUE(bad_pg.ok());
  auto q = (*bad_pg)->query("SELECT 1");
  ASSERT_FALSE(q.ok());
  messages += (*bad_pg)->describe() + "\n" + q.status().message() + "\n";
  std::string logs = cap.stop();
  EXPECT_NE(logs.find("ledger"), std::string::npos) << "expected log lines to check";
  EXPECT_NE(logs.find("circuit open"), std::string::npos) << logs;
  expect_no_secret(logs, "logs");
  expect_no_secret(messages, "error messages and descriptions");
  ::unsetenv("TS_TEST_ADMIN_KEY");
  ::unsetenv("TS_TEST_LEDGER_URL");
}

TEST(Secrets, MissingSecretSourcesAreClearConfigErrors) {
  auto no_env = parse_config("[admin]\nkey_env = \"TS_TEST_UNSET_VARIABLE\"\n", "c.toml");
  ASSERT_FALSE(no_env.ok());
  EXPECT_NE(no_env.status().message().find("c.toml:"), std::string::npos);
  EXPECT_NE(no_env.status().message().find("TS_TEST_UNSET_VARIABLE"), std::string::npos);
  auto no_file = parse_config("[ledger]\nurl_file = \"/nonexistent/secret\"\n", "c.toml");
  ASSERT_FALSE(no_file.ok());
  EXPECT_NE(no_file.status().message().find("/nonexistent/secret"), std::string::npos);
  auto both = parse_config("[admin]\nkey_sha256 = \"" + sha256_hex("x") + "\"\nkey_env = \"HOME\"\n", "c.toml");
  EXPECT_FALSE(both.ok());
  std::string dir = ::ts::testing::temp_dir();
  std::ofstream(dir + "/k") << "from-a-file\n";
  auto ok = parse_config("[metrics]\nkey_file = \"" + dir + "/k\"\n", "c.toml");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->metrics_key_sha256, sha256_hex("from-a-file"));
}

}  // namespace
}  // namespace ts::gateway
