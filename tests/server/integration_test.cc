// The real stack in process: stories260K, the engine's step loop, the OpenAI service and the
// HTTP server on 127.0.0.1:0, driven by a plain HTTP client. Plus the `tokenserve serve`
// binary's start-up errors and SIGTERM drain when the binary has been built.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "support/wire_client.h"
#include "http/server.h"
#include "model/model.h"
#include "engine/fault_injection.h"
#include "server/openai_service.h"
#include "test_util.h"

namespace ts::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

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

class RealServer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
    if (path.empty()) GTEST_SKIP() << "shared test data not found: stories260K-f32.gguf";
    auto m = model::Model::load(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    engine::EngineOptions eo;
    eo.num_kv_blocks = 512;
    eo.num_threads = 1;
    eo.max_model_len = 256;
    eo.seed = 1;
    auto e = engine::Engine::create(*model_, eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    backend_ = std::make_unique<EngineBackend>(*engine_);
    service_ = std::make_unique<OpenAIService>(
        *backend_, PromptBuilder::create(model_->tokenizer(), model_->gguf().get_string("tokenizer.chat_template")),
        ServiceOptions{.model_id = "stories260K"});
    http::ServerOptions ho;
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
  http::ClientResponse post(const std::string& path, const std::string& body) {
    auto r = client_.request("POST", path, body);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : http::ClientResponse{};
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<EngineBackend> backend_;
  std::unique_ptr<OpenAIService> service_;
  std::unique_ptr<http::Server> http_;
  http::Client client_;
};

TEST_F(RealServer, GreedyCompletionMatchesStreamedText) {
  const char* body = R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0})";
  auto whole = post("/v1/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json j = json::parse(whole.body);
  std::string text = j["choices"][0]["text"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(),
            j["usage"]["total_tokens"].get<int>());

  auto streamed = post("/v1/completions",
                       R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":24,"temperature":0,)"
                       R"("stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(streamed.status, 200);
  auto events = sse_data(streamed.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined;
  for (size_t i = 0; i + 2 < events.size(); ++i) joined += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, text);  // greedy: the same text either way
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], j["usage"]["completion_tokens"]);
}

TEST_F(RealServer, ChatStopLogprobsAndN) {
  auto r = post("/v1/chat/completions",
                R"({"model":"stories260K","messages":[{"role":"user","content":"Tell a story"}],)"
                R"("max_tokens":8,"n":2,"temperature":0.8,"seed":3,"logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (const auto& c : j["choices"]) {
    EXPECT_EQ(c["message"]["role"], "assistant");
    const json& lp = c["logprobs"]["content"];
    ASSERT_FALSE(lp.empty());
    EXPECT_LE(lp[0]["logprob"].get<double>(), 0.0);
    EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  }
  auto stopped = post("/v1/completions",
                      R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":40,"temperature":0,"stop":["."]})");
  ASSERT_EQ(stopped.status, 200);
  json s = json::parse(stopped.body);
  EXPECT_EQ(s["choices"][0]["text"].get<std::string>().find('.'), std::string::npos);
}

TEST_F(RealServer, ContextLimitAndDisconnectCancel) {
  auto big = post("/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":1000})");
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("maximum context length is " + std::to_string(engine_->max_model_len())),
            std::string::npos)
      << big.body;

  http::Client c;
  ASSERT_TRUE(c.connect("127.0.0.1", http_->port()).ok());
  int max_tokens = engine_->max_model_len() - 8;
  ASSERT_TRUE(c.send_request("POST", "/v1/completions",
                             json{{"model", "stories260K"}, {"prompt", "Once"}, {"max_tokens", max_tokens},
                                  {"n", 16}, {"stream", true}, {"ignore_eos", true}}
                                 .dump())
                  .ok());
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(head->status, 200);
  ASSERT_TRUE(c.read_chunk().ok());
  c.close();
  // The job ends either cancelled (the usual case) or, on a very fast machine, complete.
  const auto& counters = service_->counters();
  auto until = std::chrono::steady_clock::now() + 5s;
  while (counters.requests_cancelled.load() == 0 && counters.completion_tokens.load() == 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  until = std::chrono::steady_clock::now() + 5s;
  while (!engine_->idle() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(engine_->idle());  // the request left the engine either way
  if (counters.completion_tokens.load() == uint64_t{16} * max_tokens)
    GTEST_SKIP() << "the model finished all tokens before the disconnect was seen";
  EXPECT_EQ(counters.requests_cancelled.load(), 1u);
  EXPECT_LT(counters.completion_tokens.load(), uint64_t{16} * max_tokens);  // partial usage kept
  EXPECT_LT(engine_->stats().generation_tokens_total, int64_t{16} * max_tokens);
}

// ---- The binary (skipped until `tokenserve` is built with the serve command) ----

// $TOKENSERVE_BIN, else the build's tokenserve.
std::string tokenserve_binary() {
  if (const char* env = std::getenv("TOKENSERVE_BIN"); env && *env) return env;
  std::string p = std::string(TS_BINARY_DIR) + "/tokenserve";
  return std::filesystem::exists(p) ? p : "";
}

int run_capture(const std::string& cmd, std::string* out) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[512];
  while (fgets(buf, sizeof(buf), f)) *out += buf;
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST_F(RealServer, EngineFaultInOneRequestIs500AndTheServerKeepsServing) {
  engine::set_fault_hook([](const engine::Request& r) {
    return r.sampling.seed.value_or(0) == 13 ? engine::Fault::kNanLogits : engine::Fault::kNone;
  });
  auto bad = post("/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":4,"seed":13})");
  EXPECT_EQ(bad.status, 500) << bad.body;
  json e = json::parse(bad.body, nullptr, false);
  ASSERT_TRUE(e.is_object() && e.contains("error")) << bad.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("non-finite"), std::string::npos) << bad.body;
  auto stream = post("/v1/completions",
                     R"({"model":"stories260K","prompt":"Once","max_tokens":4,"seed":13,"stream":true})");
  EXPECT_EQ(stream.status, 200);
  EXPECT_NE(stream.body.find("\"error\""), std::string::npos) << stream.body;
  engine::set_fault_hook({});
  auto good = post("/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":4,"seed":13})");
  EXPECT_EQ(good.status, 200) << good.body;
}

TEST(ServeBinary, BadModelPathAndOccupiedPortAreOneClearLine) {
  std::string bin = tokenserve_binary();
  if (bin.empty()) GTEST_SKIP() << "tokenserve binary not built";
  std::string help;
  if (run_capture(bin + " serve --help", &help) != 0) GTEST_SKIP() << "serve command not registered";
  std::string out;
  EXPECT_EQ(run_capture(bin + " serve -m /nonexistent/model.gguf", &out), 1);
  EXPECT_NE(out.find("model file not found: /nonexistent/model.gguf"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;

  std::string model = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
  if (model.empty()) GTEST_SKIP() << "stories260K missing";
  http::Server blocker(http::ServerOptions{});
  ASSERT_TRUE(blocker.start().ok());
  out.clear();
  EXPECT_EQ(run_capture(bin + " serve -m " + model + " --port " + std::to_string(blocker.port()), &out), 1);
  EXPECT_NE(out.find("already in use"), std::string::npos) << out;
}

TEST(ServeBinary, SigtermDrainsAndExitsZero) {
  std::string bin = tokenserve_binary();
  std::string model = ::ts::testing::shared_path("models/stories260K/stories260K-f32.gguf");
  if (bin.empty() || model.empty()) GTEST_SKIP() << "tokenserve binary or stories260K missing";
  std::string help;
  if (run_capture(bin + " serve --help", &help) != 0) GTEST_SKIP() << "serve command not registered";
  std::string ledger = (std::filesystem::temp_directory_path() /
                        ("ts-serve-drain-" + std::to_string(getpid()) + ".db")).string();
  std::string model_id = std::filesystem::path(model).stem().string();
  // Find a free port, then hand it to the child. Another process may take the port in between
  // (tests run in parallel): then the child exits with "already in use" and we try another.
  pid_t pid = -1;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 5 && pid < 0; ++attempt) {
    {
      http::Server probe(http::ServerOptions{});
      ASSERT_TRUE(probe.start().ok());
      port = probe.port();
    }
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::string p = std::to_string(port);
      execl(bin.c_str(), bin.c_str(), "serve", "-m", model.c_str(), "--port", p.c_str(), "--threads", "1",
            "--drain-timeout", "10", "--no-auth", "--ledger", ledger.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // Ready when our child (alive) answers with our model on that port.
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(child, nullptr, WNOHANG) == child) break;  // exited: port taken, try another
      http::Client probe_client;
      if (probe_client.connect("127.0.0.1", port).ok()) {
        auto r = probe_client.request("GET", "/v1/models");
        if (r.ok() && r->status == 200 && r->body.find(model_id) != std::string::npos &&
            waitpid(child, nullptr, WNOHANG) == 0) {
          pid = child;
          break;
        }
      }
      std::this_thread::sleep_for(10ms);
    }
    if (pid < 0 && waitpid(child, nullptr, WNOHANG) == 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
  }
  ASSERT_GT(pid, 0) << "tokenserve serve did not come up";
  // Never leak the child (it would hold ctest's output pipe open).
  struct KillOnExit {
    pid_t* pid;
    ~KillOnExit() {
      if (*pid > 0 && waitpid(*pid, nullptr, WNOHANG) == 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, nullptr, 0);
      }
    }
  } guard{&pid};
  http::Client c;
  ASSERT_TRUE(c.connect("127.0.0.1", port).ok());
  // A streaming request in flight when SIGTERM arrives still completes.
  ASSERT_TRUE(c.send_request("POST", "/v1/completions",
                             json{{"model", std::filesystem::path(model).stem().string()},
                                  {"prompt", "Once"}, {"max_tokens", 64}, {"ignore_eos", true}, {"stream", true}}
                                 .dump())
                  .ok());
  auto head = c.read_head();
  ASSERT_TRUE(head.ok());
  ASSERT_EQ(head->status, 200);
  kill(pid, SIGTERM);
  std::string body;
  while (true) {
    auto chunk = c.read_chunk();
    ASSERT_TRUE(chunk.ok()) << chunk.status().to_string();
    if (chunk->empty()) break;
    body += *chunk;
  }
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  pid = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (const char* suffix : {"", "-wal", "-shm", ".spool.jsonl"}) std::filesystem::remove(ledger + suffix);
}

}  // namespace
}  // namespace ts::server
