// tokenserve serve -m MODEL [--host 127.0.0.1 --port 8080 --threads N --kv-cache-memory 2GiB
//                  --kv-type f16|q8_0|f32
//                  --max-seqs N --max-batch-tokens N --max-model-len N --model-name NAME
//                  --io-threads N --drain-timeout S --max-body BYTES]
//                 [--ledger tokenserve.db|postgresql://... --limits redis://host:port
//                  --config governance.toml --no-auth --log-format text|json]
//                 [--trust-gateway --gateway-secret-file F | --gateway-secret-env VAR]
//                  (identity signed by `tokenserve gateway`, gateway/trust.h; no API keys here)
//                 [--tool-call-format hermes|llama3|mistral|deepseek|granite|harmony|none]
//                 [--scripted-replies FILE (test only: server/scripted_backend.h)]
//                 [--speculative off|ngram|draft --draft-model FILE --draft-tokens K
//                  --ngram-min N --ngram-max N --spec-max-decode-seqs N]
// Loads the model, opens governance (API keys, limits, quotas, usage ledger) and metrics,
// starts the engine and the OpenAI-compatible HTTP server, and serves until SIGTERM/SIGINT:
// then /ready turns 503, new work is refused, running requests finish up to the drain deadline,
// the ledger is flushed, and the process exits 0. SIGHUP reloads the governance config (a bad
// file keeps the old one). A bad model path, config file (file:line: reason), ledger/limits
// URL or an occupied port is one clear line on stderr and exit 1.
// Without --kv-cache-memory the KV budget is sized from the machine (engine/kv_budget.h: 0.9 of
// MemAvailable after the weights, capped at max-seqs full-context sequences and at 8 GiB unless
// one sequence needs more) and printed.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <pthread.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "api/tool_parser.h"
#include "cli/cli_util.h"
#include "cli/spec_flags.h"
#include "tensor/matrix.h"
#include "tools/pull.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/kv_budget.h"
#include "gateway/governor.h"
#include "gateway/prompt_registry.h"
#include "gguf/gguf.h"
#include "http/server.h"
#include "model/model.h"
#include "obs/server_metrics.h"
#include "server/backend.h"
#include "server/openai_service.h"
#include "server/prompt_builder.h"
#include "server/scripted_backend.h"

namespace ts::cli {

int cmd_serve(int argc, char** argv) {
  CLI::App app("Serve a GGUF model over an OpenAI-compatible HTTP API", "serve");
  std::string model_path, host = "127.0.0.1", kv_memory, model_name, max_body = "8MiB";
  int port = 8080, threads = 0, io_threads = 2, max_seqs = 64, max_batch_tokens = 512, max_model_len = 0;
  double drain_timeout_s = 30.0;
  float step_latency_fraction = 0.25f;
  std::string ledger = "tokenserve.db", limits, config_path, log_format = "text";
  bool no_auth = false, vllm_compat = false;
  bool trust_gateway = false;
  std::string gateway_secret_file, gateway_secret_env;
  std::string replica_id;
  size_t max_connections = 0, max_connections_per_client = 0;
  int64_t idle_timeout_s = 60;
  app.add_option("-m,--model", model_path, "GGUF model file");
  app.add_option("--host", host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", port, "port to listen on (default 8080; 0 = any free port)")->check(CLI::Range(0, 65535));
  app.add_option("-t,--threads", threads, "compute threads (default: all cores)");
  app.add_option("--io-threads", io_threads, "HTTP io threads (default 2)")->check(CLI::Range(1, 64));
  bool no_sched_hints = false;
  app.add_flag("--no-sched-hints", no_sched_hints,
               "keep the kernel's default scheduling (otherwise compute threads run SCHED_BATCH and HTTP io threads "
               "ask for a short slice, so scrapes and streams are answered at once while every core computes)");
  int io_rt_priority = 1;
  auto* io_rt_opt = app.add_option("--io-rt-priority", io_rt_priority,
                 "run the HTTP io threads SCHED_RR at this priority (1-99; default 1), so scrapes and new requests are "
                 "answered at once while every core computes; each is demoted to normal scheduling while it uses over "
                 "50 ms of CPU or wakes over 250 times in 250 ms (each real-time wake-up preempts compute); needs "
                 "CAP_SYS_NICE or RLIMIT_RTPRIO (else logged, not fatal); 0 = off")
      ->check(CLI::Range(0, 99));
  int64_t io_rt_max_wakeups = 250;
  add_io_rt_max_wakeups(app, &io_rt_max_wakeups);
  app.add_option("--kv-cache-memory", kv_memory,
                 "KV cache budget, e.g. 2GiB (default: 0.9 x the memory available after the weights, "
                 "capped at max-seqs full-context sequences and 8GiB)");
  std::string kv_type = "f16";
  app.add_option("--kv-type", kv_type, "KV cache type: f16 (default), q8_0 (half the KV memory), f32");
  app.add_option("--max-seqs", max_seqs, "running sequences at most (default 64)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-batch-tokens", max_batch_tokens, "tokens per engine step at most (default 512)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--step-latency-fraction", step_latency_fraction,
                 "while interactive requests wait or run, batch prefill per step is cut to this share of the "
                 "interactive latency target, from the step cost measured online (default 0.25; 0 = off)")
      ->check(CLI::Range(0.0f, 1.0f));
  bool no_first_token_pacing = false;
  app.add_flag("--no-first-token-pacing", no_first_token_pacing,
               "fill each step with every prompt the token budget allows (default: prompts that queue up together "
               "get their first tokens one after another where the measured step cost says that lowers their "
               "summed wait)");
  app.add_option("--max-model-len", max_model_len, "prompt + completion limit (default: the model's context)");
  app.add_option("--model-name", model_name, "model id clients use (default: the file name without .gguf)");
  app.add_option("--drain-timeout", drain_timeout_s, "seconds running requests get on shutdown (default 30)");
  app.add_option("--max-body", max_body, "largest request body (default 8MiB)");
  app.add_option("--max-connections", max_connections, "open connections at most; beyond: 503 (default 0 = no cap)");
  app.add_option("--max-connections-per-client", max_connections_per_client,
                 "open connections per client address at most; beyond: 503 (default 0 = no cap)");
  app.add_option("--idle-timeout", idle_timeout_s, "seconds an idle keep-alive connection is kept (default 60)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_option("--ledger", ledger, "usage ledger and API keys: SQLite file or postgresql:// URL (default tokenserve.db)");
  app.add_option("--limits", limits, "shared rate-limit/quota store, redis://host:port (default: in this process)");
  app.add_option("--config", config_path, "governance config (TOML): tenants, apps, limits, quotas, tiers, prices, "
                                          "admin key, log level");
  app.add_flag("--no-auth", no_auth, "serve without API keys (every request is tenant 'anonymous')");
  app.add_flag("--trust-gateway", trust_gateway,
               "behind `tokenserve gateway`: tenant/app/tier from its HMAC-signed identity, no API keys; unsigned or "
               "forged requests get 401");
  app.add_option("--gateway-secret-file", gateway_secret_file, "--trust-gateway's shared secret (first line of the file)");
  app.add_option("--gateway-secret-env", gateway_secret_env, "--trust-gateway's shared secret from this environment variable");
  app.add_flag("--metrics-vllm-compat", vllm_compat,
               "also expose every tokenserve: metric under vllm: (for stock endpoint pickers and KEDA examples)");
  app.add_option("--replica-id", replica_id,
                 "name sent in x-tokenserve-served-by on every response (default HOSTNAME:PORT)");
  app.add_option("--log-format", log_format, "log lines as text or json (default text)")
      ->check(CLI::IsMember({"text", "json"}));
  std::string isa;
  app.add_option("--isa", isa, kIsaHelp);
  std::string tool_call_format, scripted_replies;
  app.add_option("--tool-call-format", tool_call_format,
                 "how tool calls are read from the output: hermes, llama3, mistral, deepseek, granite, harmony, "
                 "none (default: detected from the chat template)");
  app.add_option("--scripted-replies", scripted_replies,
                 "TEST ONLY: answer requests with the replies of this JSON script instead of running the model "
                 "(see server/scripted_backend.h)");
  SpecFlags spec_flags;
  spec_flags.add(app);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  std::optional<api::ToolCallFormat> tool_format;
  if (!tool_call_format.empty()) {
    tool_format = api::parse_tool_call_format(tool_call_format);
    if (!tool_format)
      return fail("serve", "unknown --tool-call-format '" + tool_call_format +
                               "': expected hermes, llama3, mistral, deepseek, granite, harmony or none");
  }

  std::error_code ec;
  if (model_path.empty()) {
    // The default model, once `tokenserve pull` has fetched it.
    auto spec = tools::parse_pull_spec(tools::kDefaultModelSpec);
    std::string dflt = tools::model_path_for(
        tools::default_models_dir(std::getenv("TOKENSERVE_MODELS"), std::getenv("HOME")), *spec);
    if (!std::filesystem::is_regular_file(dflt, ec)) {
      return fail("serve", std::string("no model given and the default model is not downloaded: run 'tokenserve pull ") +
                               tools::kDefaultModelSpec + "' first, or pass -m path/to/model.gguf", 2);
    }
    model_path = dflt;
  }
  if (!std::filesystem::is_regular_file(model_path, ec))
    return fail("serve", "model file not found: " + model_path);
  std::optional<uint64_t> kv_bytes;
  if (!kv_memory.empty()) {
    kv_bytes = parse_bytes(kv_memory);
    if (!kv_bytes || *kv_bytes == 0) return fail("serve", "bad --kv-cache-memory '" + kv_memory + "'", 2);
  }
  auto kvt = model::parse_kv_type(kv_type);
  if (!kvt.ok()) return fail("serve", "bad --kv-type: " + kvt.status().message(), 2);
  auto body_bytes = parse_bytes(max_body);
  if (!body_bytes || *body_bytes == 0) return fail("serve", "bad --max-body '" + max_body + "'", 2);

  log::set_format(log_format == "json" ? log::Format::kJson : log::Format::kText);
  if (int rc = apply_isa("serve", isa); rc >= 0) return rc;
  log::info(tensor::isa_summary());

  // Signals are taken by sigwait() below; every thread started from here on inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Bind at once and answer probes while the model loads: /health 200, /ready and everything
  // else 503 + Retry-After ("loading"). An occupied port fails here, before the model is read.
  // The loading server hands its listening socket to the real one (release_listener), so the
  // port is never unbound: a probe arriving during the switch waits in the backlog. (An unbound
  // gap would let a local client's connect() pick the port as its own ephemeral source port and
  // connect to itself, hanging the probe: seen with --port 0.)
  if (replica_id.empty()) {
    char hn[256] = {};
    if (gethostname(hn, sizeof(hn) - 1) != 0) std::snprintf(hn, sizeof(hn), "localhost");
    replica_id = std::string(hn) + ":" + (port != 0 ? std::to_string(port) : "pid" + std::to_string(getpid()));
  }
  http::ServerOptions loading_opts;
  loading_opts.host = host;
  loading_opts.port = static_cast<uint16_t>(port);
  loading_opts.num_io_threads = 1;
  loading_opts.error_renderer = [](int status, std::string_view) {
    http::Response r;
    r.status = status == 404 ? 503 : status;
    r.body = R"({"error":{"message":"The model is loading; retry shortly.","type":"server_error","param":null,"code":"loading"}})";
    r.set_header("Retry-After", "1");
    return r;
  };
  loading_opts.extra_headers.emplace_back("x-tokenserve-served-by", replica_id);
  auto loading = std::make_unique<http::Server>(loading_opts);
  loading->route(http::Method::kGet, "/health", [](const http::ExchangePtr& ex) {
    http::Response r;
    r.body = R"({"status":"ok"})";
    ex->respond(std::move(r));
  });
  loading->route(http::Method::kGet, "/ready", [](const http::ExchangePtr& ex) {
    http::Response r;
    r.status = 503;
    r.body = R"({"status":"loading"})";
    r.set_header("Retry-After", "1");
    ex->respond(std::move(r));
  });
  if (Status st = loading->start(); !st.ok()) return fail("serve", st.message());
  port = loading->port();
  log::info("listening on http://" + host + ":" + std::to_string(port) + " (loading the model; /ready is 503 until it is served)");

  // Governance before the model: a bad config or URL fails in milliseconds.
  std::string gateway_secret;
  if (trust_gateway) {
    if (no_auth) return fail("serve", "--trust-gateway and --no-auth exclude each other");
    if (gateway_secret_file.empty() == gateway_secret_env.empty())
      return fail("serve", "--trust-gateway needs exactly one of --gateway-secret-file or --gateway-secret-env");
    if (!gateway_secret_file.empty()) {
      std::ifstream f(gateway_secret_file);
      if (!f || !std::getline(f, gateway_secret) || gateway_secret.empty())
        return fail("serve", "cannot read a secret from " + gateway_secret_file);
    } else if (const char* v = std::getenv(gateway_secret_env.c_str()); v && *v) {
      gateway_secret = v;
    } else {
      return fail("serve", "environment variable " + gateway_secret_env + " is not set");
    }
  } else if (!gateway_secret_file.empty() || !gateway_secret_env.empty()) {
    return fail("serve", "--gateway-secret-file/--gateway-secret-env need --trust-gateway");
  }
  auto gov = gateway::Governor::open(gateway::GovernanceOptions{.ledger = ledger,
                                                                .limits = limits,
                                                                .config_path = config_path,
                                                                .no_auth = no_auth,
                                                                .trust_gateway_secret = gateway_secret});
  if (!gov.ok()) return fail("serve", gov.status().message());
  log::set_level((*gov)->config()->log_level);
  if (!no_auth && (*gov)->config()->admin_key_sha256.empty())
    log::info("admin API disabled (no [admin] key_sha256 in the governance config)");

  // MemAvailable before the weights are mapped (their pages count as available until touched).
  Result<int64_t> mem_available = not_found("no /proc/meminfo");
  if (!kv_bytes) {
    std::ifstream meminfo("/proc/meminfo");
    if (meminfo) {
      std::stringstream text;
      text << meminfo.rdbuf();
      mem_available = engine::parse_mem_available(text.str());
    }
  }
  auto model = model::Model::load(model_path);
  if (!model.ok()) return fail("serve", "cannot load " + model_path + ": " + model.status().message());
  {
    const model::WeightMemory wm = (*model)->weight_memory();
    log::info("weights: " + engine::format_bytes(static_cast<int64_t>(wm.resident)) + " resident; " +
              engine::format_bytes(static_cast<int64_t>(wm.released)) + " of mapped file pages released after repacking");
  }
  engine::EngineOptions eo;
  eo.kv_type = *kvt;
  eo.compute_sched_batch = !no_sched_hints;
  const model::KvFootprint kv_fp = model::kv_footprint(model::KvLayout::windowed((*model)->config()),
                                                       (*model)->config(), eo.kv_type, eo.block_size);
  log::info(std::string("kv cache type: ") + model::kv_type_name(eo.kv_type) + " (" +
            std::to_string(model::kv_bytes_per_token((*model)->config(), eo.kv_type)) + " bytes per token" +
            (kv_fp.num_swa_groups > 0
                 ? "; sliding-window layers keep only their window: " + std::to_string(kv_fp.full_bytes_per_token()) +
                       " bytes per token + at most " +
                       std::to_string(kv_fp.swa_bytes_cap()) +
                       " bytes of window per sequence"
                 : std::string()) +
            ")");
  if (kv_bytes) {
    eo.kv_cache_bytes = static_cast<size_t>(*kv_bytes);
    log::info("kv cache budget: " + engine::format_bytes(static_cast<int64_t>(*kv_bytes)) + " (--kv-cache-memory)");
  } else if (!mem_available.ok()) {
    log::warn("kv cache budget: " + engine::format_bytes(static_cast<int64_t>(eo.kv_cache_bytes)) +
              " (fixed default: " + mem_available.status().message() + "); set --kv-cache-memory");
  } else {
    const model::ModelConfig& cfg = (*model)->config();
    const int64_t ctx = cfg.n_ctx_train > 0 ? cfg.n_ctx_train : (1 << 20);
    auto budget = engine::default_kv_budget(
        {.mem_available_bytes = *mem_available,
         .weight_bytes = static_cast<int64_t>(std::filesystem::file_size(model_path, ec)),
         .kv_bytes_per_token = static_cast<int64_t>(
             model::KvStorage::bytes_per_block(cfg, eo.kv_type, eo.block_size) / static_cast<size_t>(eo.block_size)),
         // Sliding-window layers hold only their window (peak: a full prefill chunk in flight).
         .kv_bytes_per_seq =
             kv_fp.num_swa_groups > 0
                 ? kv_fp.peak_blocks(max_model_len > 0 ? std::min<int64_t>(ctx, max_model_len) : ctx, max_batch_tokens) *
                       static_cast<int64_t>(kv_fp.group_block_bytes)
                 : 0,
         .max_seqs = max_seqs,
         .max_model_len = max_model_len > 0 ? std::min<int64_t>(ctx, max_model_len) : ctx});
    if (!budget.ok()) return fail("serve", "cannot size the KV cache: " + budget.status().message());
    if (budget->bytes <= 0) {
      return fail("serve", "no memory left for the KV cache after the weights (" + budget->explanation +
                               "); pass --kv-cache-memory");
    }
    eo.kv_cache_bytes = static_cast<size_t>(budget->bytes);
    log::info("kv cache budget: " + engine::format_bytes(budget->bytes) + " (" + budget->explanation +
              "; --kv-cache-memory overrides)");
  }
  eo.max_seqs = max_seqs;
  eo.max_batch_tokens = max_batch_tokens;
  eo.step_latency_fraction = step_latency_fraction;
  eo.first_token_pacing = !no_first_token_pacing;
  eo.max_model_len = max_model_len;
  eo.num_threads = threads;
  // Tier scheduling limits from the config file ([tiers.interactive] / [tiers.batch]).
  for (int t = 0; t < engine::kNumTiers; ++t) {
    const gateway::TierConfig& tc = (*gov)->config()->tiers[static_cast<size_t>(t)];
    engine::TierOptions& to = t == static_cast<int>(engine::Tier::kInteractive) ? eo.interactive : eo.batch;
    if (tc.max_running > 0) to.max_running = static_cast<int32_t>(tc.max_running);
    if (tc.max_queued > 0) to.max_queued = static_cast<int32_t>(tc.max_queued);
    if (tc.priority >= 0) to.priority = static_cast<int32_t>(tc.priority);
    if (tc.latency_target_ms > 0) to.latency_target = std::chrono::milliseconds(tc.latency_target_ms);
    if (tc.kv_share > 0) to.kv_share = static_cast<float>(tc.kv_share);
    log::info(std::string("tier ") + engine::tier_name(static_cast<engine::Tier>(t)) + ": max_running " +
              std::to_string(to.max_running) + ", kv_share " + std::to_string(to.kv_share) + ", priority " +
              std::to_string(to.priority) + ", latency_target " + std::to_string(to.latency_target.count()) +
              " ms, max_queued " + std::to_string(to.max_queued));
  }
  std::unique_ptr<model::Model> draft_model;  // --speculative draft; outlives the engine
  if (Status st = spec_flags.apply(eo, draft_model); !st.ok()) return fail("serve", st.message(), 2);
  auto engine = engine::Engine::create(**model, eo);
  if (!engine.ok()) return fail("serve", "cannot start the engine: " + engine.status().message());
  if (eo.spec.mode != engine::SpecMode::kOff) {
    log::info(std::string("speculative decoding: ") + engine::spec_mode_name(eo.spec.mode) + ", up to " +
              std::to_string(eo.spec.draft_tokens) + " draft tokens" +
              (eo.spec.mode == engine::SpecMode::kNgram
                   ? ", n-gram " + std::to_string(eo.spec.ngram.ngram_min) + ".." + std::to_string(eo.spec.ngram.ngram_max)
                   : ", draft model " + spec_flags.draft_model));
  }

  server::ServiceOptions so;
  std::string stem = std::filesystem::path(model_path).stem().string();
  so.model_id = model_name.empty() ? stem : model_name;
  if (so.model_id != stem) so.model_aliases.push_back(stem);
  const std::string& general_name = (*model)->config().name;
  if (!general_name.empty() && general_name != so.model_id) so.model_aliases.push_back(general_name);
  so.tool_call_format = tool_format;
  server::EngineBackend engine_backend(**engine);
  std::unique_ptr<server::ScriptedBackend> scripted;
  if (!scripted_replies.empty()) {
    auto script = server::ScriptedBackend::load(scripted_replies);
    if (!script.ok()) return fail("serve", script.status().message());
    log::warn("--scripted-replies: answering from " + scripted_replies + " instead of running the model (test only)");
    // No forward pass, so no context limit of the model's (tool schemas make long prompts for
    // tiny test models).
    scripted = std::make_unique<server::ScriptedBackend>((*model)->tokenizer(), std::move(script).value(),
                                                         int32_t{1} << 16);
  }
  server::Backend& backend = scripted ? static_cast<server::Backend&>(*scripted) : engine_backend;
  server::PromptBuilder prompts = server::PromptBuilder::create(
      (*model)->tokenizer(), (*model)->gguf().get_string("tokenizer.chat_template"));
  obs::ServerMetrics metrics(obs::ServerMetricsOptions{.model = so.model_id});
  so.governor = gov->get();
  so.require_auth = !no_auth && !trust_gateway;  // trusted: the governor checks the signature
  // The prompt registry lives in the ledger's database (its own connection).
  auto prompt_db = gateway::open_sql_db(ledger);
  if (!prompt_db.ok()) return fail("serve", prompt_db.status().message());
  gateway::SystemClock prompt_clock;
  gateway::PromptRegistry prompt_registry(std::shared_ptr<gateway::SqlDb>(std::move(*prompt_db)), prompt_clock);
  so.prompts = &prompt_registry;
  so.metrics = &metrics;
  so.log_requests = true;
  so.metrics_vllm_compat = vllm_compat;
  server::OpenAIService service(backend, std::move(prompts), so);

  http::ServerOptions ho;
  ho.host = host;
  ho.port = static_cast<uint16_t>(port);
  ho.num_io_threads = io_threads;
  if (!no_sched_hints) ho.io_thread_slice = std::chrono::microseconds(100);
  ho.io_rt_priority = io_rt_priority;
  ho.io_rt_max_wakeups = io_rt_max_wakeups;
  ho.io_rt_explicit = io_rt_opt->count() > 0;
  ho.max_body_bytes = static_cast<size_t>(*body_bytes);
  ho.max_connections = max_connections;
  ho.max_connections_per_client = max_connections_per_client;
  ho.idle_timeout = std::chrono::seconds(idle_timeout_s);
  ho.error_renderer = server::OpenAIService::error_renderer();
  ho.extra_headers.emplace_back("x-tokenserve-served-by", replica_id);
  ho.listen_fd = loading->release_listener();
  loading->stop();
  loading.reset();
  if (ho.listen_fd < 0) return fail("serve", "lost the listening socket of the loading server");
  http::Server http(ho);
  service.register_routes(http);
  if (Status st = http.start(); !st.ok()) return fail("serve", st.message());

  log::info("serving model '" + so.model_id + "' on http://" + host + ":" + std::to_string(http.port()) +
            " (context " + std::to_string((*engine)->max_model_len()) + ", kv " +
            engine::format_bytes(static_cast<int64_t>(eo.kv_cache_bytes)) + ", max seqs " +
            std::to_string(max_seqs) + ", io threads " + std::to_string(io_threads) + ")");

  int sig = 0;
  while (true) {
    sigwait(&sigs, &sig);
    if (sig != SIGHUP) break;
    log::info("received SIGHUP: reloading the governance config");
    (void)(*gov)->reload_config();  // logs the outcome; a bad file keeps the old config
  }
  char deadline[32];
  std::snprintf(deadline, sizeof(deadline), "%.1f", drain_timeout_s);
  log::info(std::string("received ") + (sig == SIGTERM ? "SIGTERM" : "SIGINT") + ": draining (up to " +
            deadline + " s)");
  service.begin_drain();
  // Keep listening while requests are in flight, so probes see /ready 503 and new requests get
  // 503 + Retry-After (instead of a refused connection) until the last one finishes; then close.
  const auto drain_start = std::chrono::steady_clock::now();
  const auto drain_budget = std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1000));
  while (std::chrono::steady_clock::now() - drain_start < drain_budget && http.stats().num_in_flight > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto left = drain_budget - std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - drain_start);
  http.drain(std::max(left, std::chrono::milliseconds(0)));
  service.stop();
  Status flushed = (*gov)->shutdown(std::chrono::milliseconds(5000));
  gateway::GovernorStats gs = (*gov)->stats();
  if (!flushed.ok()) log::error("ledger flush incomplete: " + flushed.message());
  log::info("drained; ledger: " + std::to_string(gs.ledger.num_written) + " rows written, " +
            std::to_string(gs.ledger.num_spilled) + " spilled, " + std::to_string(gs.ledger.num_dropped) +
            " dropped; exiting");
  return 0;
}

}  // namespace ts::cli
