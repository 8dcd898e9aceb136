// The load generator against a small OpenAI-shaped streaming server written here (plain
// sockets on 127.0.0.1:0, one thread per connection), plus its pure parts.
#include "tools/bench.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "test_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tools/bench_workload.h"

namespace ts::tools {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// The fake tokenizer: BOS plus one token per word, two for words longer than 6 letters.
int64_t fake_tokens(const std::string& text) {
  int64_t n = 1;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ') ++j;
    if (j > i) n += (j - i > 6) ? 2 : 1;
    i = j;
  }
  return n;
}

struct FakeOptions {
  bool tokenize = true;      // serve POST /tokenize
  bool send_usage = true;    // final usage chunk
  int fail_every = 0;        // every k-th completion answers 429
  int token_delay_us = 300;  // between streamed tokens
  bool stall = false;        // stream keep-alive comments forever, never a token
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeOptions o) : o_(o) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(lfd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(lfd_, 128), 0);
    socklen_t len = sizeof(a);
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeOpenAiServer() {
    stopping_ = true;
    accept_thread_.join();
    std::lock_guard lk(mu_);
    for (auto& t : conns_) t.join();
    ::close(lfd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::atomic<int64_t> completions{0}, served_prompt_tokens{0}, served_completion_tokens{0}, tokenize_calls{0};
  std::vector<json> bodies() {
    std::lock_guard lk(mu_);
    return bodies_;
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept(lfd_, nullptr, nullptr);
      if (c < 0) continue;
      std::lock_guard lk(mu_);
      conns_.emplace_back([this, c] {
        serve(c);
        ::close(c);
      });
    }
  }

  static bool send_str(int fd, const std::string& s) {
    return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  static std::string chunk(const std::string& s) {
    char hex[32];
    std::snprintf(hex, sizeof(hex), "%zx\r\n", s.size());
    return hex + s + "\r\n";
  }
  // Sends one SSE event split over two HTTP chunks, so event and chunk boundaries differ.
  static bool send_event(int fd, const std::string& data) {
    std::string ev = "data: " + data + "\n\n";
    size_t half = ev.size() / 2;
    return send_str(fd, chunk(ev.substr(0, half))) && send_str(fd, chunk(ev.substr(half)));
  }
  static void send_json(int fd, int status, const std::string& reason, const json& j) {
    std::string body = j.dump();
    send_str(fd, "HTTP/1.1 " + std::to_string(status) + " " + reason +
                     "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body);
  }

  void serve(int fd) {
    std::string in;
    char buf[8192];
    size_t head_end;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      in.append(buf, static_cast<size_t>(n));
    }
    std::string head = in.substr(0, head_end);
    size_t cl_pos = head.find("Content-Length: ");
    size_t content_length = cl_pos == std::string::npos ? 0 : std::stoul(head.substr(cl_pos + 16));
    std::string body = in.substr(head_end + 4);
    while (body.size() < content_length) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      body.append(buf, static_cast<size_t>(n));
    }
    const std::string line = head.substr(0, head.find("\r\n"));
    json j = json::parse(body, nullptr, false);
    if (line.rfind("POST /tokenize ", 0) == 0) {
      if (!o_.tokenize) return send_json(fd, 404, "Not Found", {{"error", {{"message", "no route"}}}});
      ++tokenize_calls;
      json toks = json::array();
      for (int64_t i = 0; i < fake_tokens(j.value("prompt", "")); ++i) toks.push_back(i);
      return send_json(fd, 200, "OK", {{"tokens", toks}});
    }
    if (line.rfind("POST /v1/completions ", 0) != 0 || j.is_discarded())
      return send_json(fd, 404, "Not Found", {{"error", {{"message", "no route"}}}});
    const int64_t k = ++completions;
    {
      std::lock_guard lk(mu_);
      bodies_.push_back(j);
    }
    if (o_.fail_every > 0 && k % o_.fail_every == 0)
      return send_json(fd, 429, "Too Many Requests",
                       {{"error", {{"message", "rate limit reached"}, {"type", "rate_limit_error"}, {"code", "rate_limit"}}}});
    send_str(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    if (o_.stall) {
      while (!stopping_ && send_str(fd, chunk(": waiting\n\n"))) std::this_thread::sleep_for(10ms);
      return;
    }
    const int64_t prompt_tokens = fake_tokens(j.value("prompt", ""));
    const int64_t n = j.value("max_tokens", 16);
    for (int64_t i = 0; i < n; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(o_.token_delay_us));
      json c = {{"id", "cmpl-1"}, {"object", "text_completion"},
                {"choices", {{{"index", 0}, {"text", " w" + std::to_string(i)}, {"finish_reason", nullptr}}}}};
      if (!send_event(fd, c.dump())) return;
    }
    send_event(fd, json{{"id", "cmpl-1"}, {"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}}}}.dump());
    if (o_.send_usage)
      send_event(fd, json{{"id", "cmpl-1"}, {"choices", json::array()},
                          {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", n},
                                     {"total_tokens", prompt_tokens + n}}}}.dump());
    send_event(fd, "[DONE]");
    send_str(fd, "0\r\n\r\n");
    served_prompt_tokens += prompt_tokens;
    served_completion_tokens += n;
  }

  FakeOptions o_;
  int lfd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
  std::vector<json> bodies_;
};

BenchOptions base_options(const FakeOpenAiServer& s) {
  BenchOptions o;
  o.url = s.url();
  o.model = "fake-model";
  o.input_tokens = 40;
  o.output_tokens = 12;
  o.request_timeout_s = 20;
  return o;
}

TEST(Bench, ClosedLoopTokenCountsEqualServerUsage) {
  FakeOpenAiServer server({});
  BenchOptions o = base_options(server);
  o.concurrency = 4;
  o.max_requests = 20;
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->num_ok, 20);
  EXPECT_EQ(rep->num_errors, 0);
  EXPECT_EQ(rep->num_sent, 20);
  EXPECT_EQ(server.completions.load(), 20);
  EXPECT_EQ(rep->total_output_tokens, server.served_completion_tokens.load());
  EXPECT_EQ(rep->total_prompt_tokens, server.served_prompt_tokens.load());
  EXPECT_EQ(rep->total_output_tokens, 20 * 12);
  EXPECT_EQ(rep->num_usage_reported, 20);
  EXPECT_TRUE(rep->prompts_exact);
  EXPECT_GT(server.tokenize_calls.load(), 0);
  std::set<std::string> prompts;
  for (const RequestRecord& r : rep->records) {
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.prompt_tokens, 40) << "prompt lengths are exact with /tokenize";
    EXPECT_EQ(r.num_chunks, 12);
    EXPECT_EQ(r.itl_ms.size(), 11u);
    EXPECT_GT(r.ttft_ms, 0);
    EXPECT_GE(r.e2e_ms, r.ttft_ms);
    EXPECT_GT(r.tpot_ms, 0);
  }
  for (const json& b : server.bodies()) {
    EXPECT_EQ(b["model"], "fake-model");
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["max_tokens"], 12);
    EXPECT_FALSE(b.contains("tier"));
    prompts.insert(b["prompt"].get<std::string>().substr(0, 40));
  }
  EXPECT_EQ(prompts.size(), 20u) << "prompts are randomised, not repeated";
  EXPECT_EQ(rep->ttft_ms.count, 20);
  EXPECT_EQ(rep->itl_ms.count, 20 * 11);
  EXPECT_GT(rep->output_tok_per_s, 0);
  EXPECT_NEAR(rep->req_per_s, 20 / rep->elapsed_s, 1e-9);
  EXPECT_EQ(rep->num_good, 20);  // no SLO: every success counts
  EXPECT_DOUBLE_EQ(rep->goodput_share, 1.0);
}

TEST(Bench, PoissonArrivalsAndCountingWithoutUsageOrTokenizer) {
  FakeOpenAiServer server({.tokenize = false, .send_usage = false});
  BenchOptions o = base_options(server);
  o.rate = 100;
  o.max_requests = 15;
  o.tier = "batch";
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_EQ(rep->num_ok, 15);
  EXPECT_FALSE(rep->prompts_exact);
  EXPECT_EQ(rep->num_usage_reported, 0);
  EXPECT_EQ(rep->total_output_tokens, 15 * 12);  // counted from chunks
  EXPECT_EQ(rep->total_output_tokens, server.served_completion_tokens.load());
  double last = -1;
  for (const RequestRecord& r : rep->records) {
    EXPECT_GT(r.scheduled_s, last);  // exponential gaps are positive
    last = r.scheduled_s;
    EXPECT_EQ(r.prompt_tokens, 40);  // target, as nothing measured it
  }
  EXPECT_GT(last, 0.01);  // 15 arrivals at 100/s take ~150 ms, not zero
  for (const json& b : server.bodies()) EXPECT_EQ(b["tier"], "batch");
}

TEST(Bench, ErrorsByStatusAndGoodput) {
  FakeOpenAiServer server({.fail_every = 3});
  BenchOptions o = base_options(server);
  o.concurrency = 2;
  o.max_requests = 12;
  o.slo_ttft_ms = 60000;  // generous: every success is good
  o.slo_tpot_ms = 60000;
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->num_ok, 8);
  EXPECT_EQ(rep->num_errors, 4);
  ASSERT_EQ(rep->errors.count("429"), 1u);
  EXPECT_EQ(rep->errors.at("429"), 4);
  EXPECT_EQ(rep->num_good, 8);
  EXPECT_NEAR(rep->goodput_share, 8.0 / 12, 1e-12);
  EXPECT_EQ(rep->total_output_tokens, server.served_completion_tokens.load());
  bool saw_message = false;
  for (const RequestRecord& r : rep->records)
    if (r.error == "429") saw_message |= r.error_message == "rate limit reached";
  EXPECT_TRUE(saw_message);
  std::string text = format_report(*rep);
  EXPECT_NE(text.find("429: 4"), std::string::npos) << text;

  // A TTFT SLO nothing can meet makes goodput zero while throughput stays.
  o.slo_ttft_ms = 0.000001;
  rep = run_bench(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->num_good, 0);
  EXPECT_GT(rep->req_per_s, 0);
}

TEST(Bench, StopFlagEndsRunWithPartialReport) {
  FakeOpenAiServer server({.stall = true});
  BenchOptions o = base_options(server);
  o.concurrency = 3;
  o.max_requests = 50;
  std::atomic<bool> stop{false};
  o.stop = &stop;
  std::thread stopper([&] {  // Ctrl-C once all three clients wait on the stalled server
    while (server.completions.load() < 3) std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(100ms);
    stop = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  auto rep = run_bench(o);
  stopper.join();
  ASSERT_TRUE(rep.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(rep->interrupted);
  EXPECT_EQ(rep->num_cancelled, 3);
  EXPECT_EQ(rep->num_ok, 0);
  EXPECT_EQ(rep->num_errors, 0);
  EXPECT_NE(format_report(*rep).find("INTERRUPTED"), std::string::npos);
}

TEST(Bench, StopWhilePreparingPromptsSendsNothing) {
  FakeOpenAiServer server({});
  BenchOptions o = base_options(server);
  o.concurrency = 2;
  o.max_requests = 500;
  std::atomic<bool> stop{true};
  o.stop = &stop;
  auto rep = run_bench(o);
  EXPECT_EQ(rep.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(server.completions.load(), 0);
}

TEST(Bench, DurationBoundsTheRunAndDrainCutsStragglers) {
  FakeOpenAiServer server({.stall = true});
  BenchOptions o = base_options(server);
  o.rate = 50;
  o.duration_s = 0.3;
  o.drain_s = 0.2;
  auto t0 = std::chrono::steady_clock::now();
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_FALSE(rep->interrupted);
  EXPECT_GT(rep->num_cancelled, 0);
  EXPECT_EQ(rep->num_cancelled, rep->num_sent);
  for (const RequestRecord& r : rep->records) EXPECT_LT(r.scheduled_s, 0.3);
}

TEST(Bench, SharedPrefixIsCommonAndLengthsStayExact) {
  FakeOpenAiServer server({});
  BenchOptions o = base_options(server);
  o.concurrency = 2;
  o.max_requests = 6;
  o.shared_prefix = 20;
  o.input_tokens = 50;
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->num_ok, 6);
  auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 6u);
  std::string first = bodies[0]["prompt"];
  // The prefix: the leading words worth 20 tokens (BOS included) in the fake tokenizer.
  size_t cut = 0;
  while (fake_tokens(first.substr(0, cut)) < 20) cut = first.find(' ', cut + 1);
  std::string prefix = first.substr(0, cut);
  EXPECT_EQ(fake_tokens(prefix), 20);
  std::set<std::string> rests;
  for (const json& b : bodies) {
    std::string p = b["prompt"];
    EXPECT_EQ(p.rfind(prefix, 0), 0u) << p;
    EXPECT_EQ(fake_tokens(p), 50);
    rests.insert(p.substr(prefix.size()));
  }
  EXPECT_EQ(rests.size(), 6u);
  EXPECT_NE(rep->mode.find("shared prefix 20"), std::string::npos);
}

TEST(Bench, ReplayFollowsTheFile) {
  FakeOpenAiServer server({});
  std::string path = ::ts::testing::temp_dir() + "/replay.jsonl";
  std::ofstream(path) << "{\"offset\": 0.2, \"input_tokens\": 30, \"output_tokens\": 5, \"tier\": \"batch\"}\n"
                         "{\"offset\": 0.0, \"input_tokens\": 20, \"output_tokens\": 3}\n"
                         "\n{\"offset\": 0.1, \"input_tokens\": 25, \"output_tokens\": 4, \"tier\": \"interactive\"}\n";
  BenchOptions o;
  o.url = server.url() + "/v1";
  o.model = "m";
  o.scenario = "replay:" + path;
  auto rep = run_bench(o);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_EQ(rep->num_ok, 3);
  const int64_t outs[] = {3, 4, 5}, ins[] = {20, 25, 30};
  const double offs[] = {0.0, 0.1, 0.2};
  for (int i = 0; i < 3; ++i) {
    const RequestRecord& r = rep->records[static_cast<size_t>(i)];
    EXPECT_EQ(r.output_tokens, outs[i]);
    EXPECT_EQ(r.prompt_tokens, ins[i]);
    EXPECT_DOUBLE_EQ(r.scheduled_s, offs[i]);
    EXPECT_GE(r.start_s, offs[i]);
  }
  EXPECT_EQ(rep->records[2].tier, "batch");
  EXPECT_EQ(rep->records[0].tier, "");
  EXPECT_EQ(rep->total_output_tokens, server.served_completion_tokens.load());
}

TEST(Bench, RejectsUnboundedOrAmbiguousRuns) {
  BenchOptions o;
  o.url = "http://127.0.0.1:1";
  o.model = "m";
  o.concurrency = 1;
  EXPECT_EQ(run_bench(o).status().code(), StatusCode::kInvalidArgument);  // no bound
  o.max_requests = 1;
  o.rate = 1;
  EXPECT_EQ(run_bench(o).status().code(), StatusCode::kInvalidArgument);  // both modes
  o.rate = 0;
  o.scenario = "nope";
  EXPECT_EQ(run_bench(o).status().code(), StatusCode::kInvalidArgument);
  o.scenario = "short-short";
  EXPECT_EQ(run_bench(o).status().code(), StatusCode::kUnavailable);  // nothing listens
}

TEST(Bench, SummaryOfHandMadeRecords) {
  std::vector<RequestRecord> recs;
  auto ok = [](int64_t i, double ttft, double e2e, int64_t out) {
    RequestRecord r;
    r.index = i;
    r.ok = true;
    r.start_s = 0.1;
    r.ttft_ms = ttft;
    r.e2e_ms = e2e;
    r.output_tokens = out;
    r.prompt_tokens = 10;
    r.tpot_ms = (e2e - ttft) / static_cast<double>(out - 1);
    r.itl_ms.assign(static_cast<size_t>(out - 1), r.tpot_ms);
    return r;
  };
  recs.push_back(ok(0, 100, 1100, 11));   // TPOT 100
  recs.push_back(ok(1, 900, 1400, 11));   // TTFT misses 800
  recs.push_back(ok(2, 200, 2200, 11));   // TPOT 200 misses 100
  recs.push_back(ok(3, 300, 800, 6));     // TPOT 100: good
  RequestRecord err;
  err.index = 4;
  err.start_s = 0.2;
  err.http_status = 503;
  err.error = "503";
  recs.push_back(err);
  RequestRecord cancelled;
  cancelled.index = 5;
  cancelled.start_s = 0.3;
  cancelled.cancelled = true;
  recs.push_back(cancelled);
  BenchReport r = summarize_records(recs, 2.0, 800.0, 100.0);
  EXPECT_EQ(r.num_sent, 6);
  EXPECT_EQ(r.num_ok, 4);
  EXPECT_EQ(r.num_errors, 1);
  EXPECT_EQ(r.num_cancelled, 1);
  EXPECT_EQ(r.num_good, 2);
  EXPECT_DOUBLE_EQ(r.goodput_share, 2.0 / 5);
  EXPECT_DOUBLE_EQ(r.goodput_rate, 1.0);
  EXPECT_EQ(r.total_output_tokens, 11 + 11 + 11 + 6);
  EXPECT_DOUBLE_EQ(r.output_tok_per_s, 39 / 2.0);
  EXPECT_DOUBLE_EQ(r.total_tok_per_s, (39 + 40) / 2.0);
  EXPECT_DOUBLE_EQ(r.req_per_s, 2.0);
  EXPECT_DOUBLE_EQ(r.ttft_ms.mean, 375);
  EXPECT_DOUBLE_EQ(r.ttft_ms.p50, 250);  // between 200 and 300
  EXPECT_DOUBLE_EQ(r.tpot_ms.max, 200);
  EXPECT_EQ(r.itl_ms.count, 35);
  EXPECT_EQ(r.errors.at("503"), 1);

  auto j = json::parse(report_json(r));
  EXPECT_EQ(j["requests"]["ok"], 4);
  EXPECT_EQ(j["goodput"]["good"], 2);
  EXPECT_EQ(j["errors"]["503"], 1);
  EXPECT_EQ(j["per_request"].size(), 6u);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["p50"].get<double>(), 250);
  std::string svg = report_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("TTFT distribution"), std::string::npos);
  EXPECT_NE(svg.find("Throughput over time"), std::string::npos);
  EXPECT_GE(std::count(svg.begin(), svg.end(), '\n'), 20);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.rfind("</svg>"), std::string::npos);
}

TEST(Bench, DurationsAndReplayParsing) {
  EXPECT_DOUBLE_EQ(*parse_duration_ms("800ms"), 800);
  EXPECT_DOUBLE_EQ(*parse_duration_ms("0.5s"), 500);
  EXPECT_DOUBLE_EQ(*parse_duration_ms("100"), 100);
  EXPECT_DOUBLE_EQ(*parse_duration_ms("250us"), 0.25);
  EXPECT_FALSE(parse_duration_ms("fast").has_value());
  EXPECT_FALSE(parse_duration_ms("5h").has_value());

  auto r = parse_replay("{\"offset\": 1, \"input_tokens\": 5, \"output_tokens\": 2}\n{\"offset\": 0.5}\n");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos);
  EXPECT_FALSE(parse_replay("{\"offset\": -1, \"input_tokens\": 5, \"output_tokens\": 2}").ok());
  EXPECT_FALSE(parse_replay("{\"offset\": 0, \"input_tokens\": 5.5, \"output_tokens\": 2}").ok());
}

TEST(Bench, ScenarioShapes) {
  auto ss = Workload::make({.scenario = "long-short"});
  ASSERT_TRUE(ss.ok());
  EXPECT_EQ(ss->at(0).input_tokens, kLongInput);
  EXPECT_EQ(ss->at(7).output_tokens, kShortOutput);
  auto sl = Workload::make({.scenario = "short-long", .output_tokens = 9});
  EXPECT_EQ(sl->at(0).input_tokens, kShortInput);
  EXPECT_EQ(sl->at(0).output_tokens, 9);
  auto mixed = Workload::make({.scenario = "mixed", .seed = 5});
  ASSERT_TRUE(mixed.ok());
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (int i = 0; i < 60; ++i) shapes.insert({mixed->at(i).input_tokens, mixed->at(i).output_tokens});
  EXPECT_EQ(shapes.size(), 3u);
  auto again = Workload::make({.scenario = "mixed", .seed = 5});
  for (int i = 0; i < 60; ++i) EXPECT_EQ(again->at(i).input_tokens, mixed->at(i).input_tokens);
  EXPECT_EQ(Workload::make({.scenario = "replay:/nonexistent"}).status().code(), StatusCode::kNotFound);
}

TEST(Bench, PromptBuilderHitsExactLengthsWithMultiTokenWords) {
  std::atomic<int> calls{0};
  PromptBuilder pb([&](const std::string& t) -> Result<int64_t> { ++calls; return fake_tokens(t); }, 9, 0);
  ASSERT_TRUE(pb.init().ok());
  int builds = 0;
  for (int64_t n : {2, 3, 17, 64, 128, 500}) {
    for (uint64_t seed = 0; seed < 40; ++seed, ++builds) {
      auto p = pb.build(n, seed);
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(p->measured_tokens, n) << "n " << n << " seed " << seed;
      EXPECT_EQ(fake_tokens(p->text), n);
    }
  }
  EXPECT_LT(calls.load(), builds * 6) << "a few /tokenize calls per prompt, not one per word";

  // A tiny-vocabulary tokenizer (about 3 letters a token, like stories260K's 512 pieces).
  auto tiny = [](const std::string& t) -> Result<int64_t> {
    int64_t n = 1;
    size_t i = 0;
    while (i < t.size()) {
      while (i < t.size() && t[i] == ' ') ++i;
      size_t j = t.find(' ', i);
      if (j == std::string::npos) j = t.size();
      if (j > i) n += static_cast<int64_t>((j - i + 2) / 3);
      i = j;
    }
    return n;
  };
  PromptBuilder small(tiny, 4, 0);
  ASSERT_TRUE(small.init().ok());
  for (int64_t n : {5, 33, 100, 300}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      auto p = small.build(n, seed);
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(p->measured_tokens, n) << "n " << n << " seed " << seed;
    }
  }
}

// Real tokenizers: stories260K's 512-piece SentencePiece vocabulary (most words are several
// pieces) and a Llama-3 BPE vocabulary, counted the way a server's /tokenize counts (with BOS).
TEST(Bench, PromptBuilderExactWithRealTokenizers) {
  int tested = 0;
  for (const char* rel : {"models/stories260K/stories260K-f32.gguf", "models/llama.cpp-vocab/ggml-vocab-llama-bpe.gguf"}) {
    std::string path = ::ts::testing::shared_path(rel);
    if (path.empty()) continue;
    auto file = gguf::GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto tok = tokenizer::Tokenizer::from_gguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const tokenizer::Tokenizer& t = **tok;
    PromptBuilder pb([&](const std::string& text) -> Result<int64_t> {
      return static_cast<int64_t>(t.encode(text, true, false).size());
    }, 2, 24);
    ASSERT_TRUE(pb.init().ok());
    EXPECT_EQ(pb.shared_prefix_tokens(), 24) << rel;
    for (int64_t n : {30, 64, 200}) {
      for (uint64_t seed = 0; seed < 10; ++seed) {
        auto p = pb.build(n, seed);
        ASSERT_TRUE(p.ok());
        EXPECT_EQ(p->measured_tokens, n) << rel << " n " << n << " seed " << seed;
      }
    }
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "shared tokenizer files not found";
}

}  // namespace
}  // namespace ts::tools
