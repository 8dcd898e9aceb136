// tokenserve gateway --endpoints endpoints.yaml | --pool gie --pool-url URL [--pool-ca-file F]
//                    [--chain-url URL] [--host 127.0.0.1 --port 8080 --config FILE
//                    --ledger tokenserve.db|postgresql://... --limits redis://host:port --no-auth
//                    --rules rules.toml --gateway-secret-file F | --gateway-secret-env VAR
//                    --io-threads N --drain-timeout S --poll-interval-ms N --max-attempts N
//                    --no-imbalance-guard --shed-batch-waiting N --log-format text|json]
// tokenserve gateway explain --rules rules.toml --request req.json [--chat|--completion]
//                    [--tenant T --app A --state state.json]
// tokenserve gateway explain --rules rules.toml --ledger URL --request-id ID
//   (re-evaluates a recorded route_decisions row's inputs; "same_decision" says whether these
//   rules still decide as the recorded ones did)
//   Dry-runs the routing evaluator on a saved request and prints the decision (JSON) without
//   sending anything. --state gives the local/remote state snapshot (the inputs_json of a
//   route_decisions row works as it is: request facts in it are replaced by the request's).
// tokenserve gateway decisions --ledger tokenserve.db|postgresql://...
//   The route_decisions audit rows joined to their ledger rows, as JSON lines.
// The scale-out front door (SCALEOUT.md §6.2, pool = builtin): the same API keys, limits,
// quotas and ledger as `serve` (src/gateway), then the built-in picker (src/router: prefix +
// queue + KV scorers, imbalance guard, stale-metric filter) chooses a replica from the llm-d
// file-discovery list, and the request is proxied to it with streaming pass-through and
// failover before the first byte. The endpoints file is re-read when it changes (checked every
// 500 ms; a bad edit keeps the previous list and logs why). SIGTERM/SIGINT: /ready turns 503,
// new requests get 503 + Retry-After, running ones finish up to the drain timeout, the ledger
// is flushed, exit 0. A bad flag, file or URL is one line on stderr and exit 1 (2 for usage).
//
// --rules: the hybrid local/remote rules (router/rules.h); each routed request gets an
// x-tokenserve-route header and a ts_route_decisions row in the ledger database, joined to its
// ledger row by request id. Remote cooldowns are shared through the --limits Redis.
//
// Upstream requests carry GIE's x-gateway-inference-objective (the admitted tier) and
// x-gateway-inference-fairness-id (the key's tenant); --shed-batch-waiting sheds batch at
// saturation (router/picker.h).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <pthread.h>
#include <thread>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "gateway/ledger.h"
#include "gateway/route_decisions.h"
#include "gateway/sql_db.h"
#include "router/cooldown.h"
#include "router/rules.h"
#include "core/log.h"
#include "gateway/governor.h"
#include "http/server.h"
#include "net/http_client.h"
#include "router/endpoints.h"
#include "router/picker.h"
#include "router/pool.h"
#include "router/proxy.h"
#include "server/openai_service.h"

namespace ts::cli {

namespace {

Result<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int cmd_gateway_explain(int argc, char** argv) {
  CLI::App app("Dry-run the gateway's routing rules on a saved request (nothing is sent)", "gateway explain");
  std::string rules_path, request_path, state_path, tenant = "anonymous", app_name = "default", ledger, request_id;
  bool completion = false, chat = false;
  app.add_option("--rules", rules_path, "the gateway's routing rules (TOML)")->required();
  app.add_option("--request", request_path, "the request body (OpenAI JSON)");
  app.add_option("--state", state_path, "local/remote state snapshot (JSON; a route_decisions inputs_json works)");
  app.add_option("--tenant", tenant, "tenant the request is admitted as (default anonymous)");
  app.add_option("--app", app_name, "app within the tenant (default default)");
  app.add_flag("--completion", completion, "the body is a /v1/completions request (default: chat if it has messages)");
  app.add_flag("--chat", chat, "the body is a /v1/chat/completions request");
  app.add_option("--ledger", ledger, "instead of --request: re-evaluate a recorded decision from this ledger database");
  app.add_option("--request-id", request_id, "with --ledger: the request whose route_decisions row to re-evaluate");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto rules = router::load_rules(rules_path);
  if (!rules.ok()) return fail("gateway explain", rules.status().message());
  if (ledger.empty() == request_path.empty() || ledger.empty() != request_id.empty())
    return fail("gateway explain", "give --request FILE, or --ledger URL with --request-id ID", 2);
  if (!ledger.empty()) {
    // The recorded inputs snapshot holds the request's facts and the state the gateway saw.
    auto db = gateway::open_sql_db(ledger);
    if (!db.ok()) return fail("gateway explain", db.status().message());
    gateway::RouteDecisionStore store(std::shared_ptr<gateway::SqlDb>(std::move(*db)));
    auto rows = store.rows();
    if (!rows.ok()) return fail("gateway explain", rows.status().message());
    for (const auto& r : *rows) {
      if (r.request_id != request_id) continue;
      auto in = router::RouteInputs::from_json(nlohmann::json::parse(r.inputs_json, nullptr, false));
      if (!in.ok()) return fail("gateway explain", "recorded inputs of " + request_id + ": " + in.status().message());
      router::RouteDecision d = router::evaluate(*rules, *in);
      nlohmann::json recorded = nlohmann::json::parse(r.alternatives_json, nullptr, false);
      nlohmann::json rec_route = recorded.is_object() && recorded.contains("route") ? recorded["route"] : nlohmann::json();
      nlohmann::json out = {{"rule_id", d.rule_id},
                            {"target", d.plan.empty() ? "none" : d.plan[0].to_string()},
                            {"ruleset_version", rules->version},
                            {"decision", d.to_json()},
                            {"inputs", in->to_json()},
                            {"recorded", {{"rule_id", r.rule_id}, {"ruleset_version", r.ruleset_version},
                                          {"target", r.target}, {"decision", rec_route}}},
                            {"same_decision", rec_route == d.to_json()}};
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    return fail("gateway explain", "no route_decisions row for request " + request_id + " in " + ledger);
  }
  auto text = read_text(request_path);
  if (!text.ok()) return fail("gateway explain", text.status().message());
  nlohmann::json body = nlohmann::json::parse(*text, nullptr, false);
  if (!body.is_object()) return fail("gateway explain", request_path + ": not a JSON object");
  if (!body.contains("model") || !body["model"].is_string()) return fail("gateway explain", request_path + ": no model");
  router::RouteInputs in;
  if (!state_path.empty()) {
    auto st = read_text(state_path);
    if (!st.ok()) return fail("gateway explain", st.status().message());
    nlohmann::json sj = nlohmann::json::parse(*st, nullptr, false);
    auto parsed = router::RouteInputs::from_json(sj);
    if (!parsed.ok()) return fail("gateway explain", state_path + ": " + parsed.status().message());
    in = *parsed;
  }
  in.tenant = tenant;
  in.app = app_name;
  bool is_chat = chat || (!completion && body.contains("messages"));
  std::string prompt = router::routing_prompt_text(body, is_chat);
  router::fill_request_facts(body, prompt, &in);
  router::RouteDecision d = router::evaluate(*rules, in);
  nlohmann::json out = {{"rule_id", d.rule_id},
                        {"target", d.plan.empty() ? "none" : d.plan[0].to_string()},
                        {"ruleset_version", rules->version},
                        {"decision", d.to_json()},
                        {"inputs", in.to_json()}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// tokenserve gateway decisions --ledger URL: the route_decisions rows joined to their ledger
// rows, one JSON object per line (oldest first).
int cmd_gateway_decisions(int argc, char** argv) {
  CLI::App app("Print the gateway's route_decisions audit rows joined to the ledger (JSON lines)", "gateway decisions");
  std::string ledger = "tokenserve.db";
  app.add_option("--ledger", ledger, "ledger database: SQLite file or postgresql:// URL (default tokenserve.db)");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto db = gateway::open_sql_db(ledger);
  if (!db.ok()) return fail("gateway decisions", db.status().message());
  std::shared_ptr<gateway::SqlDb> shared(std::move(*db));
  gateway::RouteDecisionStore store(shared);
  auto rows = store.rows();  // creates the table when absent, so the join below never fails on it
  if (rows.ok()) {
    auto ledger_store = gateway::make_sql_ledger(shared);  // the same for ts_usage (and its newer columns)
    if (auto n = ledger_store->count(); !n.ok()) return fail("gateway decisions", n.status().message());
  }
  if (!rows.ok()) return fail("gateway decisions", rows.status().message());
  auto joined = shared->query(
      "SELECT d.request_id, u.request_id, u.tenant, u.app, u.model, u.prompt_tokens, u.completion_tokens, "
      "u.http_status, u.served_by, u.attempts FROM ts_route_decisions d LEFT JOIN ts_usage u ON u.request_id = d.request_id "
      "ORDER BY d.time_ms, d.request_id");
  if (!joined.ok()) return fail("gateway decisions", joined.status().message());
  std::map<std::string, nlohmann::json> usage;
  for (const auto& r : *joined) {
    if (r[1].empty()) continue;
    usage[r[0]] = {{"tenant", r[2]}, {"app", r[3]}, {"model", r[4]}, {"prompt_tokens", std::stoll(r[5])},
                   {"completion_tokens", std::stoll(r[6])}, {"http_status", std::stoll(r[7])},
                   {"served_by", r[8]}, {"attempts", std::stoll(r[9])}};
  }
  for (const auto& r : *rows) {
    nlohmann::json j = {{"request_id", r.request_id},
                        {"time_ms", gateway::to_unix_ms(r.time)},
                        {"rule_id", r.rule_id},
                        {"ruleset_version", r.ruleset_version},
                        {"target", r.target},
                        {"reason", r.reason},
                        {"fallback", r.fallback},
                        {"inputs", nlohmann::json::parse(r.inputs_json, nullptr, false)},
                        {"alternatives", nlohmann::json::parse(r.alternatives_json, nullptr, false)},
                        {"outcome", r.outcome},
                        {"http_status", r.http_status},
                        {"usage_source", r.usage_source},
                        {"ledger", usage.count(r.request_id) ? usage[r.request_id] : nlohmann::json()}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace

int cmd_gateway(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "explain") return cmd_gateway_explain(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "decisions") return cmd_gateway_decisions(argc - 1, argv + 1);
  CLI::App app("Route OpenAI requests across tokenserve replicas, with one governance for all", "gateway");
  std::string endpoints_path, host = "127.0.0.1", ledger = "tokenserve.db", limits, config_path, log_format = "text";
  int port = 8080, io_threads = 1, poll_ms = 50, max_attempts = 3;
  double drain_timeout_s = 30.0, guard_abs = 8, guard_rel = 1.5, shed_batch_waiting = 0;
  bool no_auth = false, no_guard = false, trust_destination = false;
  std::string rules_path, secret_file, secret_env;
  std::string pool_mode = "builtin", pool_url, pool_ca_file;
  app.add_option("--endpoints", endpoints_path,
                 "llm-d file-discovery YAML (endpoints: [{name, address, port, labels}]); required with --pool builtin");
  app.add_option("--pool", pool_mode, "builtin (our picker over --endpoints) or gie (forward to --pool-url, an InferencePool route)")
      ->check(CLI::IsMember({"builtin", "gie"}));
  app.add_option("--pool-url", pool_url, "with --pool gie: the InferencePool route's base URL (http:// or https://)");
  app.add_option("--pool-ca-file", pool_ca_file, "with an https --pool-url: verify it with this CA (PEM)");
  std::string chain_url;
  app.add_option("--chain-url", chain_url,
                 "with --pool builtin: send requests through this proxy (e.g. HAProxy set-dst), naming the picked "
                 "endpoint first in x-gateway-destination-endpoint");
  app.add_option("--host", host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", port, "port to listen on (default 8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  // One io thread by default: the gateway's io threads never block (workers do the upstream
  // calls), and a second one in the same io_context hands every posted write across threads
  // (condition-variable wake-ups: ~2 context switches per request more, SCALEOUT.md §8.14).
  app.add_option("--io-threads", io_threads, "HTTP io threads (default 1; more only for very high request rates)")
      ->check(CLI::Range(1, 64));
  app.add_option("--drain-timeout", drain_timeout_s, "seconds running requests get on shutdown (default 30)");
  app.add_option("--ledger", ledger, "usage ledger and API keys: SQLite file or postgresql:// URL (default tokenserve.db)");
  app.add_option("--limits", limits, "shared rate-limit/quota store, redis://host:port (default: in this process)");
  app.add_option("--config", config_path, "governance config (TOML), as for serve");
  app.add_flag("--no-auth", no_auth, "no API keys (every request is tenant 'anonymous')");
  app.add_option("--poll-interval-ms", poll_ms, "scrape /ready and /metrics of each endpoint every N ms (default 50)")
      ->check(CLI::Range(10, 60'000));
  int ledger_sync_ms = 10;
  app.add_option("--ledger-sync-ms", ledger_sync_ms,
                 "ledger journal: one fdatasync per N ms for every row of that interval, off the request path (a crash "
                 "of the process loses no row; a power loss at most the last N ms not yet in the database); 0 = "
                 "fdatasync each row before its request ends, as serve does (default 10)")
      ->check(CLI::Range(0, 1000));
  int ledger_commit_ms = 100;
  app.add_option("--ledger-commit-ms", ledger_commit_ms,
                 "under load, commit journaled ledger rows to the database at most once per N ms (larger "
                 "transactions, less CPU per row; durability is the journal's, see --ledger-sync-ms); 0 = after "
                 "every sync (default 100)")
      ->check(CLI::Range(0, 10'000));
  bool no_sched_hints = false;
  app.add_flag("--no-sched-hints", no_sched_hints, "keep the kernel's default scheduler slice for the HTTP io and worker threads");
  int io_rt_priority = 0;
  app.add_option("--io-rt-priority", io_rt_priority,
                 "run the HTTP io threads SCHED_RR at this priority (1-99), each demoted to normal scheduling while "
                 "it uses over 50 ms of CPU or wakes over 250 times in 250 ms; needs CAP_SYS_NICE or RLIMIT_RTPRIO "
                 "(else logged, not fatal); 0 = off (the default: the io threads are all of the gateway's work, and "
                 "on a host shared with replicas they would preempt the replicas' compute at every proxied event)")
      ->check(CLI::Range(0, 99));
  int64_t io_rt_max_wakeups = 250;
  add_io_rt_max_wakeups(app, &io_rt_max_wakeups);
  app.add_option("--max-attempts", max_attempts, "endpoints tried per request before the first byte (default 3)")
      ->check(CLI::Range(1, 16));
  app.add_option("--imbalance-abs", guard_abs, "guard: max - min load (waiting + running) must exceed this (default 8)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--imbalance-rel", guard_rel, "guard: and max load > this x min load (default 1.5)")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--shed-batch-waiting", shed_batch_waiting,
                 "shed batch requests (429 + Retry-After) while every endpoint has >= N waiting (default 0 = never)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_flag("--no-imbalance-guard", no_guard, "route by prefix even when load is imbalanced (for comparisons)");
  app.add_flag("--trust-destination-header", trust_destination,
               "route by an upstream picker's x-gateway-destination-endpoint list when a request has one");
  app.add_option("--rules", rules_path, "hybrid local/remote routing rules (TOML; see `gateway explain`)");
  app.add_option("--gateway-secret-file", secret_file,
                 "sign tenant/app/tier headers for replicas run with --trust-gateway (secret: first line)");
  app.add_option("--gateway-secret-env", secret_env, "as --gateway-secret-file, the secret from this environment variable");
  app.add_option("--log-format", log_format, "log lines as text or json (default text)")
      ->check(CLI::IsMember({"text", "json"}));
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  log::set_format(log_format == "json" ? log::Format::kJson : log::Format::kText);

  std::optional<net::Url> gie_pool, chain_to;
  if (pool_mode == "gie") {
    if (!chain_url.empty()) return fail("gateway", "--chain-url is only for --pool builtin", 2);
    if (pool_url.empty()) return fail("gateway", "--pool gie needs --pool-url (the InferencePool route)", 2);
    if (!endpoints_path.empty()) return fail("gateway", "--pool gie takes no --endpoints (the pool's endpoint picker chooses)", 2);
    auto u = net::parse_url(pool_url);
    if (!u.ok()) return fail("gateway", "--pool-url: " + u.status().message());
    if (!u->base_path.empty()) return fail("gateway", "--pool-url: give the route's origin (no path): " + pool_url);
    if (!pool_ca_file.empty() && !std::ifstream(pool_ca_file)) return fail("gateway", "--pool-ca-file: cannot read " + pool_ca_file);
    gie_pool = *u;
  } else {
    if (endpoints_path.empty()) return fail("gateway", "--endpoints FILE is required (or --pool gie --pool-url URL)", 2);
    if (!pool_url.empty()) return fail("gateway", "--pool-url is only for --pool gie", 2);
    if (!chain_url.empty()) {
      auto u = net::parse_url(chain_url);
      if (!u.ok()) return fail("gateway", "--chain-url: " + u.status().message());
      if (!u->base_path.empty() || u->tls) return fail("gateway", "--chain-url: give an http:// origin (no path): " + chain_url);
      chain_to = *u;
    }
    auto initial = router::load_endpoints_file(endpoints_path);
    if (!initial.ok()) return fail("gateway", initial.status().message());
  }
  std::optional<router::RuleSet> rules;
  if (!rules_path.empty()) {
    auto r = router::load_rules(rules_path);
    if (!r.ok()) return fail("gateway", r.status().message());
    rules = std::move(*r);
  }
  std::string gateway_secret;
  if (!secret_file.empty() && !secret_env.empty()) return fail("gateway", "give --gateway-secret-file or --gateway-secret-env, not both");
  if (!secret_file.empty()) {
    std::ifstream f(secret_file);
    if (!f || !std::getline(f, gateway_secret) || gateway_secret.empty())
      return fail("gateway", "cannot read a secret from " + secret_file);
  }
  if (!secret_env.empty()) {
    const char* v = std::getenv(secret_env.c_str());
    if (!v || !*v) return fail("gateway", "environment variable " + secret_env + " is not set");
    gateway_secret = v;
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  auto gov = gateway::Governor::open(
      gateway::GovernanceOptions{.ledger = ledger, .limits = limits, .config_path = config_path, .no_auth = no_auth,
                                 .writer = gateway::LedgerWriterOptions{.sync_interval = gateway::Millis(ledger_sync_ms),
                                                                       .commit_interval = gateway::Millis(ledger_commit_ms)}});
  if (!gov.ok()) return fail("gateway", gov.status().message());
  log::set_level((*gov)->config()->log_level);

  const std::string limits_url = (*gov)->config()->limits_url.empty() ? limits : (*gov)->config()->limits_url;
  const std::string ledger_url = (*gov)->config()->ledger_url.empty() ? ledger : (*gov)->config()->ledger_url;
  auto cooldowns = router::CooldownTracker::open(limits_url);
  if (!cooldowns.ok()) return fail("gateway", cooldowns.status().message());
  auto audit_db = gateway::open_sql_db(ledger_url);
  if (!audit_db.ok()) return fail("gateway", audit_db.status().message());
  gateway::RouteDecisionWriter audit(std::shared_ptr<gateway::SqlDb>(std::move(*audit_db)));
  if (rules)
    log::info("gateway: " + std::to_string(rules->rules.size()) + " routing rules, " +
              std::to_string(rules->remotes.size()) + " remotes from " + rules_path + " (version " + rules->version +
              "); cooldowns " + ((*cooldowns)->shared() ? "shared via Redis" : "in this process"));

  router::PickerOptions po;
  po.imbalance_guard = !no_guard;
  po.guard_abs = guard_abs;
  po.guard_rel = guard_rel;
  po.shed_batch_waiting = shed_batch_waiting;
  po.stale_after = std::chrono::milliseconds(3 * poll_ms + 100);  // 3 intervals + one slow scrape
  router::Picker picker(po);
  router::EndpointPool pool(router::PoolOptions{.poll_interval = std::chrono::milliseconds(poll_ms)});
  router::EndpointsWatcher watcher(endpoints_path);
  if (!gie_pool) {
    (void)watcher.poll();
    pool.set_endpoints(watcher.endpoints());
    pool.start();
  }

  router::Proxy proxy(pool, picker,
                      router::ProxyOptions{.max_attempts = max_attempts, .governor = gov->get(), .require_auth = !no_auth,
                                          .trust_destination_header = trust_destination,
                                          .rules = rules ? &*rules : nullptr,
                                          .cooldowns = cooldowns->get(),
                                          .audit = &audit,
                                          .gateway_secret = gateway_secret,
                                          .gie_pool = gie_pool,
                                          .gie_ca_file = pool_ca_file,
                                          .chain_to = chain_to,
                                          .worker_slice = std::chrono::microseconds(no_sched_hints ? 0 : 100),
                                          // Governance in this process (no Redis, SQLite with the
                                          // journal synced off the request path): its steps never
                                          // wait, so they run on the io thread (router/proxy.h).
                                          .inline_steps = limits_url.empty() && !ledger_url.starts_with("postgres") &&
                                                          ledger_sync_ms > 0 && !(*cooldowns)->shared()});
  http::ServerOptions ho;
  ho.host = host;
  ho.port = static_cast<uint16_t>(port);
  ho.num_io_threads = io_threads;
  if (!no_sched_hints) ho.io_thread_slice = std::chrono::microseconds(100);
  ho.io_rt_priority = io_rt_priority;
  ho.io_rt_max_wakeups = io_rt_max_wakeups;
  ho.error_renderer = server::OpenAIService::error_renderer();
  http::Server http(ho);
  proxy.register_routes(http);
  if (Status st = http.start(); !st.ok()) return fail("gateway", st.message());
  if (gie_pool)
    log::info("gateway on http://" + host + ":" + std::to_string(http.port()) + " routing to the InferencePool route " +
              gie_pool->origin() + " (pool = gie)");
  else
    log::info("gateway on http://" + host + ":" + std::to_string(http.port()) + " routing to " +
              std::to_string(watcher.endpoints().size()) + " endpoints from " + endpoints_path);

  // Discovery watch: the file is small; a stat every 500 ms meets "within 2 s".
  std::atomic<bool> stop_watch{false};
  std::thread watch([&] {
    std::vector<router::Endpoint> before = watcher.endpoints();
    while (!stop_watch.load() && !gie_pool) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto p = watcher.poll();
      if (!p.error.ok()) log::warn("gateway: " + p.error.message());
      if (!p.changed) continue;
      for (const auto& old : before) {
        bool kept = false;
        for (const auto& e : watcher.endpoints()) kept = kept || e.name == old.name;
        if (!kept) picker.forget(old.name);
      }
      before = watcher.endpoints();
      pool.set_endpoints(before);
      log::info("gateway: endpoints file changed: " + std::to_string(before.size()) + " endpoints");
    }
  });

  int sig = 0;
  while (true) {
    sigwait(&sigs, &sig);
    if (sig != SIGHUP) break;
    log::info("received SIGHUP: reloading the governance config");
    (void)(*gov)->reload_config();
  }
  log::info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": draining");
  auto deadline = std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1000));
  proxy.shutdown(deadline);
  http.drain(std::chrono::milliseconds(1000));
  stop_watch.store(true);
  watch.join();
  pool.stop();
  if (Status a = audit.close(std::chrono::milliseconds(5000)); !a.ok()) log::error("route_decisions flush incomplete: " + a.message());
  Status flushed = (*gov)->shutdown(std::chrono::milliseconds(5000));
  if (!flushed.ok()) log::error("ledger flush incomplete: " + flushed.message());
  log::info("gateway drained; exiting");
  return 0;
}

}  // namespace ts::cli
