// LimitStore over Redis: every operation is one EVAL of a Lua script, so a multi-bucket take or
// a multi-counter reservation is atomic across all processes sharing the server. The bucket
// arithmetic mirrors bucket_refill() in memory_limit_store.cc.
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <mutex>

#include "core/log.h"
#include "gateway/limit_store.h"

namespace ts::gateway {
namespace {

// KEYS: buckets. ARGV: now_ms, window_ms, then capacity and cost per bucket.
// Returns {refused index (1-based, 0 = admitted), level of each bucket as a string}.
constexpr const char* kTakeScript = R"lua(
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local levels, lasts = {}, {}
local refused = 0
for i = 1, #KEYS do
  local cap = tonumber(ARGV[1 + 2 * i])
  local cost = tonumber(ARGV[2 + 2 * i])
  local v = redis.call('HMGET', KEYS[i], 'l', 't')
  local level, last = cap, now
  if v[1] then
    level = tonumber(v[1])
    last = tonumber(v[2])
    if now > last then level = level + (now - last) * cap / window end
    if level > cap then level = cap end
  end
  levels[i] = level
  lasts[i] = math.max(now, last)
  if refused == 0 and level + 1e-9 < cost then refused = i end
end
local out = {refused}
for i = 1, #KEYS do
  if refused == 0 then
    levels[i] = levels[i] - tonumber(ARGV[2 + 2 * i])
    redis.call('HSET', KEYS[i], 'l', tostring(levels[i]), 't', tostring(lasts[i]))
    redis.call('PEXPIRE', KEYS[i], 2 * window)
  end
  out[i + 1] = tostring(levels[i])
end
return out
)lua";

// KEYS[1]: bucket. ARGV: now_ms, window_ms, capacity, amount.
constexpr const char* kGiveScript = R"lua(
local v = redis.call('HMGET', KEYS[1], 'l', 't')
if not v[1] then return 0 end
local now, window, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local level, last = tonumber(v[1]), tonumber(v[2])
if now > last then level = level + (now - last) * cap / window end
level = math.min(cap, level + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'l', tostring(level), 't', tostring(math.max(now, last)))
return 1
)lua";

// KEYS: counters. ARGV: limit and amount per counter.
// Returns {status (1 admitted, 0 refused, -1 uninitialized), index (1-based), used...}.
constexpr const char* kReserveScript = R"lua(
local used = {}
local refused = 0
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if not v then return {-1, i} end
  used[i] = tonumber(v)
  if refused == 0 and used[i] + tonumber(ARGV[2 * i]) > tonumber(ARGV[2 * i - 1]) then refused = i end
end
if refused == 0 then
  for i = 1, #KEYS do used[i] = redis.call('INCRBY', KEYS[i], ARGV[2 * i]) end
end
local out = {refused == 0 and 1 or 0, refused}
for i = 1, #KEYS do out[i + 2] = used[i] end
return out
)lua";

// KEYS[1]: counter. ARGV: delta, ttl_ms.
constexpr const char* kAddScript = R"lua(
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return v
)lua";

// KEYS[1]: counter. ARGV: delta, ttl_ms. Returns 1 when it existed (and was changed), else 0.
constexpr const char* kAddExistingScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

// KEYS[1] counter, KEYS[2] applied-charge marker; ARGV delta, ttl ms.
constexpr const char* kAddExistingOnceScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  redis.call('INCRBY', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
)lua";

struct ReplyDeleter {
  void operator()(redisReply* r) const { if (r) freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisLimitStore final : public LimitStore {
 public:
  RedisLimitStore(RedisOptions options, std::string host, int port, std::string password, int db)
      : options_(std::move(options)), host_(std::move(host)), port_(port),
        password_(std::move(password)), db_(db) {}
  ~RedisLimitStore() override {
    if (ctx_) redisFree(ctx_);
  }

  std::string describe() const override {
    return "redis://" + host_ + ":" + std::to_string(port_) + "/" + std::to_string(db_);
  }

  Result<TakeResult> take(std::span<const BucketSpec> buckets, WallTime now) override {
    std::vector<std::string> args = {"EVAL", kTakeScript, std::to_string(buckets.size())};
    for (const auto& b : buckets) args.push_back(options_.prefix + b.key);
    args.push_back(std::to_string(to_unix_ms(now)));
    args.push_back(std::to_string(kRateWindow.count()));
    for (const auto& b : buckets) {
      args.push_back(std::to_string(b.capacity));
      args.push_back(std::to_string(b.cost));
    }
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != buckets.size() + 1)
      return internal_error("redis: unexpected reply to the take script");
    TakeResult r;
    int refused = int(reply->element[0]->integer);
    r.admitted = refused == 0;
    r.refused = refused - 1;
    for (size_t i = 0; i < buckets.size(); ++i) {
      double level = std::strtod(reply->element[i + 1]->str, nullptr);
      r.states.push_back(bucket_state(level, buckets[i].capacity));
      if (int(i) == r.refused) r.retry_after = bucket_wait(level, buckets[i].cost, buckets[i].capacity);
    }
    return r;
  }

  Status give(const BucketSpec& b, WallTime now) override {
    std::vector<std::string> args = {"EVAL", kGiveScript, "1", options_.prefix + b.key,
                                     std::to_string(to_unix_ms(now)),
                                     std::to_string(kRateWindow.count()),
                                     std::to_string(b.capacity), std::to_string(b.cost)};
    return command(args).status();
  }

  Result<QuotaTake> quota_reserve(std::span<const QuotaSpec> quotas) override {
    std::vector<std::string> args = {"EVAL", kReserveScript, std::to_string(quotas.size())};
    for (const auto& q : quotas) args.push_back(options_.prefix + q.key);
    for (const auto& q : quotas) {
      args.push_back(std::to_string(q.limit));
      args.push_back(std::to_string(q.amount));
    }
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2)
      return internal_error("redis: unexpected reply to the quota script");
    QuotaTake r;
    int64_t status = reply->element[0]->integer;
    int index = int(reply->element[1]->integer) - 1;
    if (status == -1) {
      r.uninitialized = index;
      return r;
    }
    r.admitted = status == 1;
    if (!r.admitted) r.refused = index;
    for (size_t i = 2; i < reply->elements; ++i) r.used.push_back(reply->element[i]->integer);
    return r;
  }

  Status quota_init(const std::string& key, int64_t used, Millis ttl) override {
    std::vector<std::string> args = {"SET", options_.prefix + key, std::to_string(used), "NX",
                                     "PX", std::to_string(std::max<int64_t>(1, ttl.count()))};
    return command(args).status();
  }

  Status quota_add(const std::string& key, int64_t delta, Millis ttl) override {
    std::vector<std::string> args = {"EVAL", kAddScript, "1", options_.prefix + key,
                                     std::to_string(delta),
                                     std::to_string(std::max<int64_t>(1, ttl.count()))};
    return command(args).status();
  }

  Result<bool> quota_add_existing(const std::string& key, int64_t delta, Millis ttl) override {
    std::vector<std::string> args = {"EVAL", kAddExistingScript, "1", options_.prefix + key,
                                     std::to_string(delta),
                                     std::to_string(std::max<int64_t>(1, ttl.count()))};
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type != REDIS_REPLY_INTEGER) return internal_error("redis: unexpected reply to add-existing");
    return reply->integer == 1;
  }

  Result<bool> quota_add_existing_once(const std::string& key, int64_t delta, Millis ttl,
                                       const std::string& charge_id) override {
    std::vector<std::string> args = {"EVAL", kAddExistingOnceScript, "2", options_.prefix + key,
                                     options_.prefix + "qc:" + charge_id, std::to_string(delta),
                                     std::to_string(std::max<int64_t>(1, ttl.count()))};
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type != REDIS_REPLY_INTEGER)
      return internal_error("redis: unexpected reply to add-existing-once");
    return reply->integer == 1;
  }

  bool shared() const override { return true; }

  Result<bool> claim_once(const std::string& key, Millis ttl) override {
    std::vector<std::string> args = {"SET", options_.prefix + key, "1", "NX", "PX",
                                     std::to_string(std::max<int64_t>(1, ttl.count()))};
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type == REDIS_REPLY_NIL) return false;  // the key existed: not created
    if (reply->type == REDIS_REPLY_STATUS) return true;  // "OK"
    return internal_error("redis: unexpected reply to SET NX");
  }

  Result<std::optional<int64_t>> quota_used(const std::string& key) override {
    std::vector<std::string> args = {"GET", options_.prefix + key};
    TS_ASSIGN_OR_RETURN(Reply reply, command(args));
    if (reply->type == REDIS_REPLY_NIL) return std::optional<int64_t>();
    if (reply->type != REDIS_REPLY_STRING) return internal_error("redis: unexpected GET reply");
    return std::optional<int64_t>(std::strtoll(reply->str, nullptr, 10));
  }

 private:
  Status connect() {
    if (ctx_ && ctx_->err == 0) return ok_status();
    if (ctx_) redisFree(ctx_);
    timeval tv{.tv_sec = options_.timeout.count() / 1000,
               .tv_usec = (options_.timeout.count() % 1000) * 1000};
    ctx_ = redisConnectWithTimeout(host_.c_str(), port_, tv);
    if (!ctx_ || ctx_->err) {
      std::string msg = ctx_ ? ctx_->errstr : "out of memory";
      if (ctx_) redisFree(ctx_);
      ctx_ = nullptr;
      return unavailable("redis " + describe() + ": cannot connect: " + msg);
    }
    redisSetTimeout(ctx_, tv);
    auto simple = [&](std::vector<std::string> args) -> Status {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const auto& a : args) { argv.push_back(a.data()); lens.push_back(a.size()); }
      Reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data())));
      if (!r || r->type == REDIS_REPLY_ERROR)
        return unavailable("redis " + describe() + ": " + (r ? r->str : ctx_->errstr));
      return ok_status();
    };
    Status st = password_.empty() ? ok_status() : simple({"AUTH", password_});
    if (st.ok() && db_ != 0) st = simple({"SELECT", std::to_string(db_)});
    if (!st.ok()) {
      redisFree(ctx_);
      ctx_ = nullptr;
    }
    return st;
  }

  Result<Reply> command(const std::vector<std::string>& args) {
    std::lock_guard lock(mu_);
    TS_RETURN_IF_ERROR(connect());
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data())));
    if (!r) {
      std::string msg = ctx_->errstr;
      redisFree(ctx_);
      ctx_ = nullptr;  // reconnect next time
      return unavailable("redis " + describe() + ": " + msg);
    }
    if (r->type == REDIS_REPLY_ERROR) return internal_error("redis " + describe() + ": " + r->str);
    return r;
  }

  const RedisOptions options_;
  const std::string host_;
  const int port_;
  const std::string password_;
  const int db_;
  std::mutex mu_;
  redisContext* ctx_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<LimitStore>> make_redis_limit_store(const RedisOptions& options) {
  std::string_view u = options.url;
  auto bad = [&] {
    // Never echo a password: keep only what follows the last '@'.
    std::string shown = options.url;
    if (size_t at = shown.rfind('@'); at != std::string::npos)
      shown = (shown.starts_with("redis://") ? "redis://***@" : "***@") + shown.substr(at + 1);
    return invalid_argument("bad Redis URL '" + shown + "': expected redis://[:password@]host:port[/db]");
  };
  if (!u.starts_with("redis://")) return bad();
  u.remove_prefix(8);
  std::string password;
  if (size_t at = u.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = u.substr(0, at);
    size_t colon = cred.find(':');
    password = std::string(colon == std::string_view::npos ? cred : cred.substr(colon + 1));
    u.remove_prefix(at + 1);
  }
  int db = 0;
  if (size_t slash = u.find('/'); slash != std::string_view::npos) {
    std::string d(u.substr(slash + 1));
    if (!d.empty()) {
      char* end = nullptr;
      db = int(std::strtol(d.c_str(), &end, 10));
      if (*end) return bad();
    }
    u = u.substr(0, slash);
  }
  std::string host(u);
  int port = 6379;
  if (size_t colon = u.rfind(':'); colon != std::string_view::npos) {
    host = std::string(u.substr(0, colon));
    std::string p(u.substr(colon + 1));
    char* end = nullptr;
    port = int(std::strtol(p.c_str(), &end, 10));
    if (p.empty() || *end || port <= 0 || port > 65535) return bad();
  }
  if (host.empty()) return bad();
  return std::unique_ptr<LimitStore>(
      std::make_unique<RedisLimitStore>(options, host, port, password, db));
}

}  // namespace ts::gateway
