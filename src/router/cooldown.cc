#include "router/cooldown.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <vector>

#include "core/log.h"

namespace ts::router {

namespace {
struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// INCRBY a usage counter; the expiry is set only when it is created.
constexpr const char* kUsageScript = R"lua(
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return n
)lua";

// INCR the failure counter; the expiry is set only when the counter is created.
constexpr const char* kFailureScript = R"lua(
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
)lua";
}  // namespace

struct CooldownTracker::Redis {
  std::string host;
  int port = 6379;
  std::string password;
  int db = 0;
  std::string prefix;
  std::mutex mu;
  redisContext* ctx = nullptr;
  ~Redis() {
    if (ctx) redisFree(ctx);
  }

  std::chrono::steady_clock::time_point retry_at{};  // after a failed connect: local view until then

  Result<Reply> command(const std::vector<std::string>& args) {
    std::lock_guard lock(mu);
    timeval tv{.tv_sec = 0, .tv_usec = 250'000};
    if (!ctx || ctx->err) {
      // A Redis that is down must not cost every routing decision a connect (up to 250 ms when
      // packets are dropped): one attempt a second at most.
      if (std::chrono::steady_clock::now() < retry_at) return unavailable("cooldowns: redis unreachable (retrying)");
      retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (ctx) redisFree(ctx);
      ctx = redisConnectWithTimeout(host.c_str(), port, tv);
      if (!ctx || ctx->err) {
        std::string msg = ctx ? ctx->errstr : "out of memory";
        if (ctx) redisFree(ctx);
        ctx = nullptr;
        return unavailable("cooldowns: redis " + host + ":" + std::to_string(port) + ": " + msg);
      }
      redisSetTimeout(ctx, tv);
      auto simple = [&](std::vector<std::string> a) {
        std::vector<const char*> argv;
        std::vector<size_t> lens;
        for (const auto& x : a) argv.push_back(x.data()), lens.push_back(x.size());
        Reply r(static_cast<redisReply*>(redisCommandArgv(ctx, int(argv.size()), argv.data(), lens.data())));
        return r && r->type != REDIS_REPLY_ERROR;
      };
      if ((!password.empty() && !simple({"AUTH", password})) || (db != 0 && !simple({"SELECT", std::to_string(db)}))) {
        redisFree(ctx);
        ctx = nullptr;
        return unavailable("cooldowns: redis AUTH/SELECT failed");
      }
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) argv.push_back(a.data()), lens.push_back(a.size());
    Reply r(static_cast<redisReply*>(redisCommandArgv(ctx, int(argv.size()), argv.data(), lens.data())));
    if (!r) {
      std::string msg = ctx->errstr;
      redisFree(ctx);
      ctx = nullptr;
      retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      return unavailable("cooldowns: redis: " + msg);
    }
    if (r->type == REDIS_REPLY_ERROR) return internal_error(std::string("cooldowns: redis: ") + r->str);
    return r;
  }
};

Result<std::unique_ptr<CooldownTracker>> CooldownTracker::open(const std::string& url, std::string prefix) {
  std::unique_ptr<CooldownTracker> t(new CooldownTracker());
  if (url.empty()) return t;
  auto bad = [] { return invalid_argument("bad Redis URL for cooldowns: expected redis://[:password@]host:port[/db]"); };
  std::string_view u = url;
  if (!u.starts_with("redis://")) return bad();
  u.remove_prefix(8);
  auto r = std::make_unique<Redis>();
  if (size_t at = u.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = u.substr(0, at);
    size_t colon = cred.find(':');
    r->password = std::string(colon == std::string_view::npos ? cred : cred.substr(colon + 1));
    u.remove_prefix(at + 1);
  }
  if (size_t slash = u.find('/'); slash != std::string_view::npos) {
    std::string d(u.substr(slash + 1));
    if (!d.empty()) {
      char* end = nullptr;
      r->db = int(std::strtol(d.c_str(), &end, 10));
      if (*end) return bad();
    }
    u = u.substr(0, slash);
  }
  r->host = std::string(u);
  if (size_t colon = u.rfind(':'); colon != std::string_view::npos) {
    r->host = std::string(u.substr(0, colon));
    std::string p(u.substr(colon + 1));
    char* end = nullptr;
    r->port = int(std::strtol(p.c_str(), &end, 10));
    if (p.empty() || *end || r->port <= 0 || r->port > 65535) return bad();
  }
  if (r->host.empty()) return bad();
  r->prefix = std::move(prefix);
  t->redis_ = std::move(r);
  return t;
}

CooldownTracker::~CooldownTracker() = default;

bool CooldownTracker::shared() const { return redis_ != nullptr; }

void CooldownTracker::store_error(const Status& st) {
  num_store_errors_.fetch_add(1);
  if (!outage_logged_.exchange(true)) log::warn(st.message() + "; remote cooldowns use this gateway's own view until it answers");
}

Millis CooldownTracker::remaining(const std::string& remote) {
  if (redis_) {
    auto r = redis_->command({"PTTL", redis_->prefix + "cd:" + remote});
    if (r.ok() && (*r)->type == REDIS_REPLY_INTEGER) {
      outage_logged_.store(false);
      return Millis(std::max<long long>(0, (*r)->integer));  // -2 absent, -1 no ttl (never set by us)
    }
    store_error(r.ok() ? internal_error("cooldowns: unexpected PTTL reply") : r.status());
  }
  std::lock_guard lock(mu_);
  auto it = until_.find(remote);
  if (it == until_.end()) return Millis(0);
  auto left = std::chrono::duration_cast<Millis>(it->second - std::chrono::steady_clock::now());
  return left.count() > 0 ? left : Millis(0);
}

bool CooldownTracker::trip(const std::string& remote, Millis ttl) {
  ttl = std::max(ttl, Millis(1));
  bool started = false;
  {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    auto it = until_.find(remote);
    if (it == until_.end() || it->second <= now) {
      until_[remote] = now + ttl;
      started = true;
    }
    failures_.erase(remote);
  }
  if (redis_) {
    auto r = redis_->command({"SET", redis_->prefix + "cd:" + remote, "1", "NX", "PX", std::to_string(ttl.count())});
    if (r.ok()) {
      started = (*r)->type == REDIS_REPLY_STATUS;  // OK when created; nil when one was running
      (void)redis_->command({"DEL", redis_->prefix + "cdf:" + remote});
    } else {
      store_error(r.status());
    }
  }
  if (started) {
    num_trips_.fetch_add(1);
    log::warn("remote " + remote + " cools down for " + std::to_string(ttl.count()) + " ms");
  }
  return started;
}

int64_t CooldownTracker::record_failure(const std::string& remote, Millis window) {
  int64_t local;
  {
    std::lock_guard lock(mu_);
    local = ++failures_[remote];
  }
  if (redis_) {
    auto r = redis_->command({"EVAL", kFailureScript, "1", redis_->prefix + "cdf:" + remote,
                              std::to_string(std::max<int64_t>(1, window.count()))});
    if (r.ok() && (*r)->type == REDIS_REPLY_INTEGER) return (*r)->integer;
    store_error(r.ok() ? internal_error("cooldowns: unexpected EVAL reply") : r.status());
  }
  return local;
}

void CooldownTracker::record_success(const std::string& remote) {
  {
    std::lock_guard lock(mu_);
    failures_.erase(remote);
  }
  if (redis_) {
    auto r = redis_->command({"DEL", redis_->prefix + "cdf:" + remote});
    if (!r.ok()) store_error(r.status());
  }
}

void CooldownTracker::add_usage(const std::string& remote, int64_t day, int64_t tokens) {
  if (tokens <= 0) return;
  {
    std::lock_guard lock(mu_);
    usage_[{remote, day}] += tokens;
  }
  if (redis_) {
    auto r = redis_->command({"EVAL", kUsageScript, "1", redis_->prefix + "rb:" + remote + ":" + std::to_string(day),
                              std::to_string(tokens), std::to_string(2 * 86'400'000)});
    if (!r.ok()) store_error(r.status());
  }
}

int64_t CooldownTracker::usage(const std::string& remote, int64_t day) {
  if (redis_) {
    auto r = redis_->command({"GET", redis_->prefix + "rb:" + remote + ":" + std::to_string(day)});
    if (r.ok()) {
      if ((*r)->type == REDIS_REPLY_NIL) return 0;
      if ((*r)->type == REDIS_REPLY_STRING) return std::strtoll((*r)->str, nullptr, 10);
    }
    store_error(r.ok() ? internal_error("cooldowns: unexpected GET reply") : r.status());
  }
  std::lock_guard lock(mu_);
  auto it = usage_.find({remote, day});
  return it == usage_.end() ? 0 : it->second;
}

}  // namespace ts::router
