// The OpenAI service over real sockets, with a scripted fake engine (so no forward pass is
// needed) and the real stories260K tokenizer.
#include "server/openai_service.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gateway/governor.h"
#include "gateway/sha256.h"
#include "obs/server_metrics.h"
#include "support/wire_client.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Generates max_tokens tokens per choice: token ids 100, 101, ... with text "w0 w1 ...".
// kHold streams one token every 5 ms until cancelled or done.
class FakeBackend : public Backend {
 public:
  enum class Mode { kImmediate, kHold, kQueueFull, kError };
  explicit FakeBackend(int32_t max_model_len) : max_model_len_(max_model_len) {}
  ~FakeBackend() override {
    for (auto& t : threads_) t.join();
  }

  Result<std::shared_ptr<engine::RequestHandle>> submit(engine::Request req) override {
    if (mode == Mode::kQueueFull || stopped_) return unavailable("the interactive queue is full");
    {
      std::lock_guard<std::mutex> lock(mu_);
      submitted.push_back(req);
    }
    auto state = std::make_shared<engine::detail::HandleState>();
    auto handle = std::make_shared<engine::RequestHandle>(req.id, req.sampling.n, state);
    last_state = state;
    if (mode == Mode::kError) {
      engine::Event tok{.index = 0, .text = "w0", .token_ids = {100}};
      push(*state, tok);
      engine::Event fail{.index = 0, .finish = engine::FinishReason::kError,
                         .error = Status(StatusCode::kDeadlineExceeded, "request deadline passed"),
                         .request_done = true};
      push(*state, fail);
    } else if (mode == Mode::kImmediate) {
      produce(req, state, false);
    } else {
      threads_.emplace_back([this, req, state] { produce(req, state, true); });
    }
    return handle;
  }
  int32_t max_model_len() const override { return max_model_len_; }
  void stop_accepting() override { stopped_ = true; }
  engine::EngineStats stats() const override { return {}; }

  std::atomic<Mode> mode{Mode::kImmediate};
  std::mutex mu_;
  std::vector<engine::Request> submitted;
  std::shared_ptr<engine::detail::HandleState> last_state;
  std::atomic<bool> saw_cancel{false};

 private:
  static void push(engine::detail::HandleState& s, engine::Event ev) { s.push(std::move(ev)); }
  void produce(const engine::Request& req, const std::shared_ptr<engine::detail::HandleState>& state,
               bool slow) {
    int64_t generated = 0;
    int32_t n = req.sampling.n;
    for (int32_t t = 0; t < req.sampling.max_tokens; ++t) {
      for (int32_t c = 0; c < n; ++c) {
        if (state->cancel_requested.load()) {
          saw_cancel = true;
          for (int32_t k = 0; k < n; ++k) {
            engine::Event ev{.index = k, .finish = engine::FinishReason::kCancelled};
            ev.request_done = k == n - 1;
            ev.usage = {.prompt_tokens = static_cast<int64_t>(req.prompt_tokens.size()),
                        .completion_tokens = generated, .cached_tokens = 0};
            push(*state, std::move(ev));
          }
          return;
        }
        engine::Event ev;
        ev.index = c;
        ev.text = (t == 0 ? "w" : " w") + std::to_string(t);
        ev.token_ids = {100 + t};
        if (req.sampling.logprobs) {
          engine::LogprobEntry e{.sampled = {100 + t, -0.5f}, .top = {}};
          for (int32_t k = 0; k < req.sampling.top_logprobs; ++k) e.top.push_back({100 + k, -0.5f - k});
          ev.logprobs.push_back(e);
        }
        ++generated;
        bool last = t == req.sampling.max_tokens - 1;
        if (last) ev.finish = engine::FinishReason::kLength;
        ev.request_done = last && c == n - 1;
        ev.usage = {.prompt_tokens = static_cast<int64_t>(req.prompt_tokens.size()),
                    .completion_tokens = generated, .cached_tokens = 2};
        push(*state, std::move(ev));
      }
      if (slow) std::this_thread::sleep_for(5ms);
    }
  }
  int32_t max_model_len_;
  std::atomic<bool> stopped_{false};
  std::vector<std::thread> threads_;
};

// Parses an SSE body into its data payloads.
std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
    if (path.empty()) GTEST_SKIP() << "shared test data not found: stories260K-f32.gguf";
    auto g = gguf::GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gguf_ = std::move(g).value();
    auto t = tokenizer::Tokenizer::from_gguf(*gguf_);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
    backend_ = std::make_unique<FakeBackend>(64);
    ServiceOptions so{.model_id = "stories", .model_aliases = {"alias"}, .created = 123,
                      .retry_after_seconds = 2};
    add_options(&so);
    service_ = std::make_unique<OpenAIService>(*backend_, PromptBuilder::create(*tok_, std::nullopt), so);
    http::ServerOptions ho;
    ho.max_body_bytes = 4096;
    ho.error_renderer = OpenAIService::error_renderer();
    http_ = std::make_unique<http::Server>(ho);
    service_->register_routes(*http_);
    ASSERT_TRUE(http_->start().ok());
    ASSERT_TRUE(client_.connect("127.0.0.1", http_->port()).ok());
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (service_) service_->stop();
  }
  // Governed fixtures add a governor and metrics here.
  virtual void add_options(ServiceOptions*) {}
  http::ClientResponse post(const std::string& path, const std::string& body) {
    auto r = client_.request("POST", path, body);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : http::ClientResponse{};
  }
  void expect_error(const http::ClientResponse& r, int status, const std::string& param, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_TRUE(e["type"].is_string());
    if (param.empty()) EXPECT_TRUE(e["param"].is_null()) << r.body;
    else EXPECT_EQ(e["param"], param) << r.body;
    if (code.empty()) EXPECT_TRUE(e["code"].is_null()) << r.body;
    else EXPECT_EQ(e["code"], code) << r.body;
  }

  std::unique_ptr<gguf::GgufFile> gguf_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<OpenAIService> service_;
  std::unique_ptr<http::Server> http_;
  http::Client client_;
};

TEST_F(ServiceTest, CompletionWholeResponse) {
  auto r = post("/v1/completions",
                R"({"model":"stories","prompt":"Once upon a time","max_tokens":3,"temperature":0,"seed":7})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["text"], "w0 w1 w2");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  std::vector<int32_t> expect_ids = tok_->encode("Once upon a time", true, true);
  EXPECT_EQ(j["usage"]["prompt_tokens"], expect_ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], expect_ids.size() + 3);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  ASSERT_EQ(backend_->submitted.size(), 1u);
  const engine::Request& req = backend_->submitted[0];
  EXPECT_EQ(req.prompt_tokens, expect_ids);
  EXPECT_EQ(req.prompt_tokens[0], tok_->bos_id());
  EXPECT_EQ(req.sampling.max_tokens, 3);
  EXPECT_EQ(req.sampling.temperature, 0.0f);
  EXPECT_EQ(req.sampling.seed, std::optional<uint64_t>(7));
}

TEST_F(ServiceTest, CompletionArrayOfPromptsEchoAndLogprobs) {
  auto r = post("/v1/completions",
                R"({"model":"alias","prompt":["Hi","Bye"],"max_tokens":2,"echo":true,"logprobs":2,"n":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 4u);  // 2 prompts x n=2
  EXPECT_EQ(j["choices"][0]["text"], "Hiw0 w1");
  EXPECT_EQ(j["choices"][2]["text"], "Byew0 w1");
  EXPECT_EQ(j["choices"][3]["index"], 3);
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 2);  // after the echoed "Hi"
  EXPECT_EQ(backend_->submitted.size(), 2u);
  EXPECT_TRUE(backend_->submitted[0].sampling.logprobs);
  EXPECT_EQ(backend_->submitted[0].sampling.top_logprobs, 2);
}

TEST_F(ServiceTest, CompletionStreamWithUsage) {
  auto r = post("/v1/completions",
                R"({"model":"stories","prompt":"Hi","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(r.header("content-type"), "text/event-stream; charset=utf-8");
  auto events = sse_data(r.body);
  ASSERT_EQ(events.size(), 4u) << r.body;
  json c0 = json::parse(events[0]), c1 = json::parse(events[1]), u = json::parse(events[2]);
  EXPECT_EQ(c0["object"], "text_completion");
  EXPECT_EQ(c0["choices"][0]["text"], "w0");
  EXPECT_TRUE(c0["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(c0["usage"].is_null());
  EXPECT_EQ(c1["choices"][0]["text"], " w1");
  EXPECT_EQ(c1["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(events[3], "[DONE]");
  EXPECT_EQ(c0["id"], u["id"]);
}

TEST_F(ServiceTest, ChatStreamRoleContentFinishDone) {
  auto r = post("/v1/chat/completions",
                R"({"model":"stories","messages":[{"role":"user","content":"Hello"}],"max_tokens":2,"stream":true})");
  ASSERT_EQ(r.status, 200);
  auto events = sse_data(r.body);
  ASSERT_EQ(events.size(), 5u) << r.body;
  json role = json::parse(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(events[1])["choices"][0]["delta"]["content"], "w0");
  EXPECT_EQ(json::parse(events[2])["choices"][0]["delta"]["content"], " w1");
  json fin = json::parse(events[3]);
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(fin.contains("usage"));
  EXPECT_EQ(events[4], "[DONE]");
  // ChatML fallback (stories260K ships no template), one BOS.
  const engine::Request& req = backend_->submitted.at(0);
  std::vector<int32_t> expect = tok_->encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", true, true);
  EXPECT_EQ(req.prompt_tokens, expect);
}

TEST_F(ServiceTest, ChatWholeResponseWithNAndLogprobs) {
  auto r = post("/v1/chat/completions",
                R"({"model":"stories","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":1,"n":2,"logprobs":true,"top_logprobs":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "w0");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
}

TEST_F(ServiceTest, ChatDefaultMaxTokensFillsTheContext) {
  auto r = post("/v1/chat/completions", R"({"model":"stories","messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const engine::Request& req = backend_->submitted.at(0);
  EXPECT_EQ(static_cast<int64_t>(req.prompt_tokens.size()) + req.sampling.max_tokens, 64);
}

TEST_F(ServiceTest, ErrorsHaveOpenAIShapeAndStatus) {
  expect_error(post("/v1/completions", R"({"model":"gpt-9","prompt":"x"})"), 404, "model", "model_not_found");
  expect_error(post("/v1/completions", R"({"model":"stories",)"), 400, "", "invalid_json");
  expect_error(post("/v1/completions", R"({"model":"stories","prompt":"x","temperature":"a"})"), 400,
               "temperature", "invalid_type");
  expect_error(post("/v1/chat/completions", R"({"model":"stories"})"), 400, "messages",
               "missing_required_parameter");
  expect_error(post("/v1/completions", "{\"model\":\"stories\",\"prompt\":\"\xff\"}"), 400, "prompt", "invalid_utf8");
  expect_error(post("/v1/completions", R"({"model":"stories","prompt":[1,2,99999]})"), 400, "prompt", "invalid_value");
  auto big = post("/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":1000})");
  expect_error(big, 400, "prompt", "context_length_exceeded");
  EXPECT_NE(big.body.find("maximum context length is 64 tokens"), std::string::npos) << big.body;
  EXPECT_NE(big.body.find("1000 in the completion"), std::string::npos) << big.body;
  expect_error(post("/v1/nope", "{}"), 404, "", "not_found");
  EXPECT_TRUE(backend_->submitted.empty());
}

TEST_F(ServiceTest, BodyTooLargeIs413InOpenAIShape) {
  std::string body = R"({"model":"stories","prompt":")" + std::string(5000, 'a') + "\"}";
  auto r = client_.request("POST", "/v1/completions", body);
  ASSERT_TRUE(r.ok());
  expect_error(*r, 413, "", "request_too_large");
}

TEST_F(ServiceTest, QueueFullIs503WithRetryAfter) {
  backend_->mode = FakeBackend::Mode::kQueueFull;
  auto r = post("/v1/completions", R"({"model":"stories","prompt":"x"})");
  expect_error(r, 503, "", "service_unavailable");
  EXPECT_EQ(r.header("retry-after"), "2");
}

TEST_F(ServiceTest, EngineErrorBecomesErrorBodyOrErrorEvent) {
  backend_->mode = FakeBackend::Mode::kError;
  auto whole = post("/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":4})");
  expect_error(whole, 504, "", "");
  EXPECT_NE(whole.body.find("request deadline passed"), std::string::npos);
  auto streamed = post("/v1/chat/completions",
                       R"({"model":"stories","messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true})");
  ASSERT_EQ(streamed.status, 200);
  auto events = sse_data(streamed.body);
  ASSERT_EQ(events.size(), 4u) << streamed.body;  // role, "w0", error, [DONE]
  EXPECT_EQ(json::parse(events[1])["choices"][0]["delta"]["content"], "w0");
  json err = json::parse(events[2]);
  EXPECT_EQ(err["error"]["message"], "request deadline passed");
  EXPECT_EQ(events[3], "[DONE]");
}

TEST_F(ServiceTest, DisconnectCancelsTheEngineRequest) {
  backend_->mode = FakeBackend::Mode::kHold;
  ASSERT_TRUE(client_.send_request("POST", "/v1/completions",
                                   R"({"model":"stories","prompt":"x","max_tokens":60,"stream":true})")
                  .ok());
  auto head = client_.read_head();
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->status, 200);
  auto chunk = client_.read_chunk();
  ASSERT_TRUE(chunk.ok());
  EXPECT_NE(chunk->find("data: "), std::string::npos);
  client_.close();
  auto until = std::chrono::steady_clock::now() + 2s;
  while (!backend_->saw_cancel && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(2ms);
  EXPECT_TRUE(backend_->saw_cancel.load());
  until = std::chrono::steady_clock::now() + 2s;
  while (service_->counters().requests_cancelled.load() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(2ms);
  EXPECT_EQ(service_->counters().requests_cancelled.load(), 1u);
}

TEST_F(ServiceTest, ModelsTokenizeDetokenizeHealthReadyMetrics) {
  auto models = client_.request("GET", "/v1/models");
  ASSERT_TRUE(models.ok());
  json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "stories");
  EXPECT_EQ(m["data"][0]["created"], 123);
  auto one = client_.request("GET", "/v1/models/stories");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(json::parse(one->body)["object"], "model");
  auto missing = client_.request("GET", "/v1/models/org/other");
  ASSERT_TRUE(missing.ok());
  expect_error(*missing, 404, "model", "model_not_found");

  auto tk = post("/tokenize", R"({"prompt":"Once upon a time"})");
  ASSERT_EQ(tk.status, 200);
  json tj = json::parse(tk.body);
  EXPECT_EQ(tj["tokens"].get<std::vector<int32_t>>(), tok_->encode("Once upon a time", true, true));
  EXPECT_EQ(tj["max_model_len"], 64);
  // Special tokens are rendered, as Hugging Face's decode() and llama.cpp's /detokenize do.
  auto dt = post("/detokenize", json{{"tokens", tj["tokens"]}}.dump());
  ASSERT_EQ(dt.status, 200);
  EXPECT_EQ(json::parse(dt.body)["prompt"], "<s>Once upon a time");
  auto plain = post("/tokenize", R"({"content":"Once upon a time","add_special":false})");
  auto plain_ids = json::parse(plain.body)["tokens"];
  EXPECT_NE(plain_ids[0], tok_->bos_id());
  dt = post("/detokenize", json{{"tokens", plain_ids}}.dump());
  EXPECT_EQ(json::parse(dt.body)["content"], "Once upon a time");
  expect_error(post("/detokenize", R"({"tokens":[100000]})"), 400, "tokens[0]", "invalid_value");

  auto health = client_.request("GET", "/health");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  auto ready = client_.request("GET", "/ready");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 200);
  service_->begin_drain();
  ready = client_.request("GET", "/ready");
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->status, 503);
  auto refused = post("/v1/completions", R"({"model":"stories","prompt":"x"})");
  EXPECT_EQ(refused.status, 503);

  auto metrics = client_.request("GET", "/metrics");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("tokenserve_requests_total{endpoint=\"completions\"} 1\n"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("tokenserve_error_responses_total 3"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("# TYPE tokenserve_http_connections_open gauge"), std::string::npos);
}

// ---- With governance and metrics: settle exactly once on every path ----

class GovernedServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ts-governed-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "metrics.key") << kMetricsKey << "\n";
    std::ofstream(dir_ / "gov.toml") << "[tenants.acme]\nquota = { tokens = 1000, period = \"day\" }\n"
                                     << "[admin]\nkey_sha256 = \"" << gateway::sha256_hex(kAdminKey) << "\"\n"
                                     << "[metrics]\nkey_file = \"" << (dir_ / "metrics.key").string() << "\"\n"
                                     << extra_toml();
    auto gov = gateway::Governor::open({.ledger = (dir_ / "ledger.db").string(),
                                        .limits = limits_url(),
                                        .config_path = (dir_ / "gov.toml").string()});
    ASSERT_TRUE(gov.ok()) << gov.status().to_string();
    gov_ = std::move(gov).value();
    auto key = gov_->keys()->create({.tenant = "acme", .app = "bot"});
    ASSERT_TRUE(key.ok()) << key.status().to_string();
    auth_ = {{"Authorization", "Bearer " + key->secret}};
    metrics_ = std::make_unique<obs::ServerMetrics>(obs::ServerMetricsOptions{.model = "stories"});
    ServiceTest::SetUp();
  }
  void TearDown() override {
    ServiceTest::TearDown();
    gov_.reset();
    std::filesystem::remove_all(dir_);
  }
  static constexpr const char* kAdminKey = "ts-admin-secret-for-tests";
  static constexpr const char* kMetricsKey = "ts-metrics-secret-for-tests";
  virtual std::string extra_toml() { return ""; }
  virtual std::string limits_url() { return ""; }
  void add_options(ServiceOptions* so) override {
    so->governor = gov_.get();
    so->require_auth = true;
    so->metrics = metrics_.get();
  }
  // Flushes the ledger and returns its rows.
  std::vector<gateway::UsageRecord> ledger_rows() {
    service_->stop();
    EXPECT_TRUE(gov_->shutdown(std::chrono::milliseconds(5000)).ok());
    auto rows = gov_->ledger()->rows({});
    EXPECT_TRUE(rows.ok());
    return rows.ok() ? *rows : std::vector<gateway::UsageRecord>{};
  }
  int64_t quota_used() {
    auto me = gov_->usage_me(auth_[0].second);
    EXPECT_TRUE(me.ok());
    return me.ok() && !me->quotas.empty() ? me->quotas[0].used : -1;
  }

  std::filesystem::path dir_;
  std::unique_ptr<gateway::Governor> gov_;
  std::unique_ptr<obs::ServerMetrics> metrics_;
  http::HeaderList auth_;
};

TEST_F(GovernedServiceTest, SuccessSettlesOnceWithTenantNamespaceAndHeaders) {
  auto r = client_.request("POST", "/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":4})", auth_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_FALSE(r->header("x-request-id").empty());
  EXPECT_EQ(r->header("x-quota-limit-tokens"), "1000");
  ASSERT_EQ(backend_->submitted.size(), 1u);
  EXPECT_EQ(backend_->submitted[0].cache_namespace, "acme");
  json j = json::parse(r->body);
  int64_t total = j["usage"]["total_tokens"];
  EXPECT_EQ(quota_used(), total);  // settled before the response was sent
  auto rows = ledger_rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].request_id, j["id"]);
  EXPECT_EQ(rows[0].tenant, "acme");
  EXPECT_EQ(rows[0].app, "bot");
  EXPECT_EQ(rows[0].completion_tokens, 4);
  EXPECT_EQ(rows[0].finish_reason, "length");
  EXPECT_EQ(rows[0].http_status, 200);
}

TEST_F(GovernedServiceTest, DisconnectMidStreamIsSettledWithPartialUsage) {
  backend_->mode = FakeBackend::Mode::kHold;
  ASSERT_TRUE(client_.send_request("POST", "/v1/completions",
                                   R"({"model":"stories","prompt":"x","max_tokens":60,"stream":true})", auth_)
                  .ok());
  auto head = client_.read_head();
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(head->status, 200);
  EXPECT_FALSE(head->header("x-request-id").empty());
  ASSERT_TRUE(client_.read_chunk().ok());
  client_.close();
  for (int i = 0; i < 300 && metrics_->dashboard_json()["totals"]["requests"] != 1; ++i)
    std::this_thread::sleep_for(10ms);
  auto rows = ledger_rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].finish_reason, "cancelled");
  EXPECT_GT(rows[0].completion_tokens, 0);
  EXPECT_LT(rows[0].completion_tokens, 60);
  EXPECT_GT(rows[0].prompt_tokens, 0);
  std::string prom = metrics_->prometheus_text();
  EXPECT_NE(prom.find("finished_reason=\"cancelled\"} 1"), std::string::npos) << prom;
}

TEST_F(GovernedServiceTest, EngineErrorAndQueueFullAreSettledAndRefunded) {
  backend_->mode = FakeBackend::Mode::kError;
  auto e = client_.request("POST", "/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":5})", auth_);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->status, 504) << e->body;
  backend_->mode = FakeBackend::Mode::kQueueFull;
  auto q = client_.request("POST", "/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":5})", auth_);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->status, 503) << q->body;
  EXPECT_FALSE(q->header("retry-after").empty());
  EXPECT_EQ(quota_used(), 0);  // both reservations given back (the fake reports no usage on error)
  auto rows = ledger_rows();
  ASSERT_EQ(rows.size(), 2u);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.http_status < b.http_status; });
  EXPECT_EQ(rows[0].http_status, 503);
  EXPECT_EQ(rows[0].completion_tokens, 0);
  EXPECT_EQ(rows[1].http_status, 504);
  EXPECT_EQ(rows[1].finish_reason, "error");
}

TEST_F(GovernedServiceTest, NoKeyIs401BeforeParsing) {
  auto r = client_.request("POST", "/v1/completions", "{not json");
  ASSERT_TRUE(r.ok());
  expect_error(*r, 401, "", "invalid_api_key");
  EXPECT_TRUE(backend_->submitted.empty());
  EXPECT_TRUE(ledger_rows().empty());
}

// Without max_tokens the default output length is clamped to the tier's max_tokens cap instead
// of being refused by it; an explicit max_tokens above the cap is still refused (issue 11).
TEST_F(GovernedServiceTest, DefaultMaxTokensRespectsTheTierCap) {
  std::ofstream(dir_ / "gov.toml") << "[tenants.acme]\nquota = { tokens = 1000, period = \"day\" }\n"
                                   << "[tiers.interactive]\nmax_tokens = 10\n";
  ASSERT_TRUE(gov_->reload_config().ok());
  auto r = client_.request("POST", "/v1/chat/completions",
                           R"({"model":"stories","messages":[{"role":"user","content":"Hi"}]})", auth_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_EQ(backend_->submitted.size(), 1u);
  EXPECT_EQ(backend_->submitted[0].sampling.max_tokens, 10);
  auto big = client_.request("POST", "/v1/chat/completions",
                             R"({"model":"stories","messages":[{"role":"user","content":"Hi"}],"max_tokens":20})",
                             auth_);
  ASSERT_TRUE(big.ok());
  expect_error(*big, 400, "max_tokens", "max_tokens_too_large");
}

TEST_F(GovernedServiceTest, ObservabilityNeedsTheAdminOrMetricsKey) {
  for (const char* path : {"/metrics", "/dashboard", "/dashboard/data"}) {
    auto anon = client_.request("GET", path);
    ASSERT_TRUE(anon.ok());
    expect_error(*anon, 401, "", "invalid_api_key");
    auto tenant_key = client_.request("GET", path, "", auth_);  // an ordinary API key
    ASSERT_TRUE(tenant_key.ok());
    EXPECT_EQ(tenant_key->status, 401) << path;
    for (const char* key : {kAdminKey, kMetricsKey}) {
      auto ok = client_.request("GET", path, "", {{"Authorization", std::string("Bearer ") + key}});
      ASSERT_TRUE(ok.ok());
      EXPECT_EQ(ok->status, 200) << path << " " << ok->body.substr(0, 200);
    }
  }
}

class HashedLabelsTest : public GovernedServiceTest {
 protected:
  std::string extra_toml() override { return "labels = \"hash\"\n"; }  // inside [metrics]
};

TEST_F(HashedLabelsTest, TenantNamesAreHashedInMetricsAndDashboardData) {
  auto r = client_.request("POST", "/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":2})", auth_);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200) << r->body;
  http::HeaderList admin = {{"Authorization", std::string("Bearer ") + kAdminKey}};
  auto m = client_.request("GET", "/metrics", "", admin);
  auto d = client_.request("GET", "/dashboard/data", "", admin);
  ASSERT_TRUE(m.ok() && d.ok());
  std::string hashed = "h" + gateway::sha256_hex("acme").substr(0, 12);
  EXPECT_EQ(m->body.find("\"acme\""), std::string::npos);
  EXPECT_NE(m->body.find(hashed), std::string::npos) << m->body.substr(0, 2000);
  EXPECT_EQ(d->body.find("acme"), std::string::npos);
}

// A limit store that accepts connections and never answers (a hung Redis): admissions wait on
// the blocking pool, never on the io threads, so /health stays fast; once the breaker opens,
// requests are admitted fail-open and still settled.
class HungRedisTest : public GovernedServiceTest {
 protected:
  void SetUp() override {
    hole_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(hole_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(hole_fd_, 64);
    socklen_t len = sizeof(a);
    ::getsockname(hole_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    hole_port_ = ntohs(a.sin_port);
    GovernedServiceTest::SetUp();
  }
  void TearDown() override {
    GovernedServiceTest::TearDown();
    ::close(hole_fd_);
  }
  std::string limits_url() override { return "redis://127.0.0.1:" + std::to_string(hole_port_); }
  int hole_fd_ = -1;
  int hole_port_ = 0;
};

TEST_F(HungRedisTest, HealthStaysFastWhileAdmissionsWaitOnAHungLimitStore) {
  constexpr int kClients = 4;  // more than the server's io threads
  std::vector<std::unique_ptr<http::Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<http::Client>());
    ASSERT_TRUE(clients.back()->connect("127.0.0.1", http_->port()).ok());
    ASSERT_TRUE(clients.back()
                    ->send_request("POST", "/v1/completions", R"({"model":"stories","prompt":"x","max_tokens":2})",
                                   auth_)
                    .ok());
  }
  std::this_thread::sleep_for(30ms);
  http::Client probe;
  ASSERT_TRUE(probe.connect("127.0.0.1", http_->port()).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto h = probe.request("GET", "/health");
  double health_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->status, 200);
  EXPECT_LT(health_ms, 150.0) << "/health waited behind the limit store";
  for (auto& c : clients) {
    auto r = c->read_response();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->status, 200) << r->body;  // admitted fail-open
  }
  EXPECT_EQ(gov_->stats().num_admitted_fail_open, kClients);
  EXPECT_EQ(ledger_rows().size(), size_t(kClients));
}

}  // namespace
}  // namespace ts::server
