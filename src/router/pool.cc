#include "router/pool.h"

#include "core/log.h"
#include "net/http_client.h"
#include "router/replica_scrape.h"

namespace ts::router {

EndpointPool::EndpointPool(PoolOptions opts) : opts_(opts) {}

EndpointPool::~EndpointPool() { stop(); }

void EndpointPool::set_endpoints(const std::vector<Endpoint>& endpoints) {
  std::lock_guard lock(mu_);
  std::map<std::string, Entry> next;
  for (const Endpoint& e : endpoints) {
    auto it = entries_.find(e.name);
    if (it != entries_.end() && it->second.ep.address == e.address && it->second.ep.port == e.port) {
      Entry kept = std::move(it->second);
      kept.ep = e;
      kept.state.labels = e.labels;
      next.emplace(e.name, std::move(kept));
      continue;
    }
    Entry fresh;
    fresh.ep = e;
    fresh.state.name = e.name;
    fresh.state.labels = e.labels;
    fresh.state.ready = false;  // until the first poll
    next.emplace(e.name, std::move(fresh));
  }
  entries_ = std::move(next);
}

void EndpointPool::start() {
  std::lock_guard lock(mu_);
  if (poller_.joinable()) return;
  stop_ = false;
  poller_ = std::thread([this] { poll_loop(); });
}

void EndpointPool::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

std::vector<EndpointState> EndpointPool::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<EndpointState> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(e.state);
  return out;
}

void EndpointPool::ready_load(int64_t* healthy, double* waiting) const {
  std::lock_guard lock(mu_);
  *healthy = 0;
  *waiting = 0;
  for (const auto& [name, e] : entries_) {
    if (!e.state.ready || e.state.ejected) continue;
    ++*healthy;
    *waiting += e.state.waiting;
  }
}

bool EndpointPool::lookup(const std::string& name, Endpoint* out) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return false;
  *out = it->second.ep;
  return true;
}

void EndpointPool::begin_request(const std::string& name) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(name); it != entries_.end()) ++it->second.state.in_flight;
}

void EndpointPool::end_request(const std::string& name) {
  std::lock_guard lock(mu_);
  if (auto it = entries_.find(name); it != entries_.end() && it->second.state.in_flight > 0)
    --it->second.state.in_flight;
}

void EndpointPool::report_attempt(const std::string& name, bool ok) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (ok) {
    ++e.counters.attempts_ok;
    e.consecutive_failures = 0;
    return;
  }
  ++e.counters.attempts_failed;
  if (++e.consecutive_failures >= opts_.eject_after && !e.state.ejected) {
    e.state.ejected = true;
    e.ready_streak = 0;
    ++e.counters.ejections;
    log::warn("gateway: ejecting endpoint " + name + " after " + std::to_string(e.consecutive_failures) +
              " consecutive failures");
  }
}

std::map<std::string, EndpointCounters> EndpointPool::counters() const {
  std::lock_guard lock(mu_);
  std::map<std::string, EndpointCounters> out;
  for (const auto& [name, e] : entries_) out[name] = e.counters;
  return out;
}

bool EndpointPool::any_ready() const {
  std::lock_guard lock(mu_);
  for (const auto& [name, e] : entries_)
    if (e.state.ready && !e.state.ejected) return true;
  return false;
}

void EndpointPool::poll_loop() {
  // One keep-alive session per endpoint (address changes get a new one).
  std::map<std::string, std::unique_ptr<net::HttpSession>> sessions;
  std::unique_lock lock(mu_);
  while (!stop_) {
    std::vector<Endpoint> eps;
    for (const auto& [name, e] : entries_) eps.push_back(e.ep);
    lock.unlock();
    for (auto it = sessions.begin(); it != sessions.end();) {  // endpoints that left
      bool kept = false;
      for (const Endpoint& ep : eps) kept = kept || it->first == ep.name + "@" + ep.address + ":" + std::to_string(ep.port);
      it = kept ? std::next(it) : sessions.erase(it);
    }
    // Endpoints are polled in parallel: a slow one (busy, or black-holing) must not delay the
    // others' scrapes until the picker thinks their metrics are stale.
    std::vector<std::pair<const Endpoint*, net::HttpSession*>> work;
    for (const Endpoint& ep : eps) {
      auto& session = sessions[ep.name + "@" + ep.address + ":" + std::to_string(ep.port)];
      if (!session) session = std::make_unique<net::HttpSession>();
      work.emplace_back(&ep, session.get());
    }
    std::vector<std::thread> threads;
    for (size_t i = 1; i < work.size(); ++i)
      threads.emplace_back([this, w = work[i]] { poll_one(*w.first, *w.second); });
    if (!work.empty()) poll_one(*work[0].first, *work[0].second);
    for (auto& t : threads) t.join();
    lock.lock();
    cv_.wait_for(lock, opts_.poll_interval, [this] { return stop_; });
  }
}

void EndpointPool::poll_one(const Endpoint& ep, net::HttpSession& session) {
  const net::Url url{.host = ep.address, .port = ep.port};
  auto call = [&](const char* path) {
    net::HttpCallOptions co;
    co.deadline = std::chrono::steady_clock::now() + opts_.poll_timeout;
    co.connect_timeout = opts_.poll_timeout;
    co.direct = true;  // replicas are on the private network, never behind an egress proxy
    return session.fetch(url, net::HttpRequest{.path = path}, co, 16u << 20);
  };
  bool ready = false, scraped = false;
  ReplicaLoad load;
  // A keep-alive connection the server closed meanwhile: libcurl retries on a fresh one.
  if (auto r = call("/ready"); r.ok()) ready = r->head.status == 200;
  if (ready) {
    auto m = call("/metrics");
    if (m.ok() && m->head.status == 200) {
      auto parsed = parse_replica_metrics(m->body);
      if (parsed.ok()) {
        load = *parsed;
        scraped = true;
      }
    }
  }
  std::lock_guard g(mu_);
  auto it = entries_.find(ep.name);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  e.state.ready = ready;
  if (ready) {
    ++e.ready_streak;
    if (e.state.ejected && e.ready_streak >= opts_.readmit_after) {
      e.state.ejected = false;
      e.consecutive_failures = 0;
      log::info("gateway: re-admitting endpoint " + ep.name);
    }
  } else {
    e.ready_streak = 0;
  }
  if (scraped) {
    e.state.has_metrics = true;
    e.state.scraped_at = Clock::now();
    e.state.waiting = load.waiting;
    e.state.running = load.running;
    e.state.kv_usage = load.kv_usage;
  }
}

}  // namespace ts::router
