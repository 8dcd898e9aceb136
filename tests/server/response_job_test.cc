// ResponsePump and ResponseJob with real request handles fed by a producer thread (as the
// engine feeds them), the real stories260K tokenizer and an in-memory HTTP exchange that
// records what would go on the wire.
#include "server/response_job.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {
namespace {

using namespace std::chrono_literals;

class RecordingExchange : public http::Exchange {
 public:
  const http::Request& request() const override { return req_; }
  void respond(http::Response r) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = r.status;
    body_ = std::move(r.body);
    finished_ = true;
    finished_cv_.notify_all();
  }
  void start_stream(int status, std::string, http::HeaderList) override {
    std::lock_guard<std::mutex> l(mu_);
    status_ = status;
  }
  bool write(std::string data) override {
    std::lock_guard<std::mutex> l(mu_);
    body_ += data;
    return !cancelled_;
  }
  void finish() override {
    std::lock_guard<std::mutex> l(mu_);
    finished_ = true;
    finished_cv_.notify_all();
  }
  // The job settles (on_done) before it writes its last bytes, so a test that checks the body
  // after on_done waits for the response to be finished first.
  bool wait_finished(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return finished_cv_.wait_for(l, timeout, [this] { return finished_; });
  }
  bool cancelled() const override { return cancelled_.load(); }
  void on_cancel(std::function<void()> cb) override {
    std::lock_guard<std::mutex> l(mu_);
    cb_ = std::move(cb);
  }
  // The client goes away: what the HTTP server does on a disconnect.
  void disconnect() {
    cancelled_ = true;
    std::function<void()> cb;
    {
      std::lock_guard<std::mutex> l(mu_);
      cb = cb_;
    }
    if (cb) cb();
  }
  std::string body() const {
    std::lock_guard<std::mutex> l(mu_);
    return body_;
  }

 private:
  http::Request req_;
  mutable std::mutex mu_;
  int status_ = 0;
  std::string body_;
  bool finished_ = false;
  std::condition_variable finished_cv_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> cb_;
};

class ResponseJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TS_REQUIRE_SHARED(path, "models/stories260K/stories260K-f32.gguf");
    auto g = gguf::GgufFile::open(path);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    gguf_ = std::move(g).value();
    auto t = tokenizer::Tokenizer::from_gguf(*gguf_);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tok_ = std::move(t).value();
  }

  // A job over one handle; on_done stores the result and signals.
  std::shared_ptr<ResponseJob> make_job(std::shared_ptr<RecordingExchange> ex,
                                        std::shared_ptr<engine::detail::HandleState> state, int32_t n) {
    JobSpec spec;
    spec.stream = true;
    spec.n = n;
    auto handle = std::make_shared<engine::RequestHandle>("r1", n, state);
    auto job = std::make_shared<ResponseJob>(std::move(spec), ex, std::vector{handle}, *tok_,
                                             [this](const JobResult& r) {
                                               std::lock_guard<std::mutex> l(mu_);
                                               result_ = r;
                                               done_ = true;
                                               cv_.notify_all();
                                             });
    job->begin();
    return job;
  }
  bool wait_done(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [this] { return done_; });
  }

  std::unique_ptr<gguf::GgufFile> gguf_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  JobResult result_;
};

engine::Event token_event(int32_t index, int32_t id, engine::TimePoint t) {
  engine::Event ev;
  ev.index = index;
  ev.text = " x";
  ev.token_ids = {id};
  ev.time = t;
  return ev;
}

TEST_F(ResponseJobTest, PumpSleepsBetweenEventsAndRecordsEveryGap) {
  ResponsePump pump;
  auto ex = std::make_shared<RecordingExchange>();
  auto state = std::make_shared<engine::detail::HandleState>();
  pump.add(make_job(ex, state, 1));
  const uint64_t rounds0 = pump.num_rounds();
  // Six tokens 40 ms apart, then the end (with the last token, as the engine sends it).
  const auto t0 = engine::Clock::now();
  std::thread producer([&] {
    for (int i = 0; i < 6; ++i) {
      if (i > 0) std::this_thread::sleep_for(40ms);
      state->push(token_event(0, 300 + i, engine::Clock::now()));
    }
    std::this_thread::sleep_for(40ms);
    engine::Event last = token_event(0, 306, engine::Clock::now());
    last.finish = engine::FinishReason::kLength;
    last.request_done = true;
    last.usage.completion_tokens = 7;
    state->push(last);
  });
  ASSERT_TRUE(wait_done(5s));
  producer.join();
  const auto elapsed = engine::Clock::now() - t0;
  ASSERT_GE(elapsed, 240ms);
  // A 1 ms poller would have gone round ~240 times; woken by events it goes round about once
  // an event (a few more when an event lands while a round runs, or on a loaded machine).
  EXPECT_LE(pump.num_rounds() - rounds0, 60u);
  ASSERT_TRUE(ex->wait_finished(5s));
  EXPECT_NE(ex->body().find("[DONE]"), std::string::npos);
  ASSERT_EQ(result_.inter_token_gaps.size(), 6u);  // 7 tokens
  for (auto g : result_.inter_token_gaps) {
    EXPECT_GE(g.count(), 0.039);
    EXPECT_LT(g.count(), 1.0);
  }
}

TEST_F(ResponseJobTest, GapsArePerChoiceAndTokensOfOneEventHaveNone) {
  ResponsePump pump;
  auto ex = std::make_shared<RecordingExchange>();
  auto state = std::make_shared<engine::detail::HandleState>();
  const auto t = engine::Clock::now();
  // Choice 0: tokens at t, t+10ms, then two at t+30ms (one event). Choice 1: t+5ms, t+25ms.
  state->push(token_event(0, 300, t));
  state->push(token_event(1, 301, t + 5ms));
  state->push(token_event(0, 302, t + 10ms));
  state->push(token_event(1, 303, t + 25ms));
  engine::Event two = token_event(0, 304, t + 30ms);
  two.token_ids = {304, 305};
  two.finish = engine::FinishReason::kStop;
  state->push(two);
  engine::Event end1{.index = 1, .finish = engine::FinishReason::kStop, .request_done = true};
  state->push(end1);  // no token: no gap
  pump.add(make_job(ex, state, 2));
  ASSERT_TRUE(wait_done(5s));
  std::vector<double> ms;
  for (auto g : result_.inter_token_gaps) ms.push_back(std::round(g.count() * 1000.0));
  std::sort(ms.begin(), ms.end());
  EXPECT_EQ(ms, (std::vector<double>{0, 10, 20, 20}));
}

TEST_F(ResponseJobTest, DisconnectWakesThePumpAndTheCancelledEndIsTaken) {
  ResponsePump pump;
  auto ex = std::make_shared<RecordingExchange>();
  auto state = std::make_shared<engine::detail::HandleState>();
  pump.add(make_job(ex, state, 1));
  state->push(token_event(0, 300, engine::Clock::now()));
  // The "engine" answers a cancel with the cancelled end, as Engine does within a step.
  std::thread engine_side([&] {
    while (!state->cancel_requested.load()) std::this_thread::sleep_for(1ms);
    engine::Event ev{.index = 0, .finish = engine::FinishReason::kCancelled, .request_done = true};
    ev.usage.completion_tokens = 1;
    state->push(ev);
  });
  std::this_thread::sleep_for(50ms);
  const auto t0 = engine::Clock::now();
  ex->disconnect();
  ASSERT_TRUE(wait_done(2s));  // well before the 3 s cancel grace
  engine_side.join();
  EXPECT_LT(engine::Clock::now() - t0, 1s);
  EXPECT_TRUE(result_.cancelled);
  EXPECT_EQ(result_.usage.completion_tokens, 1);
}

}  // namespace
}  // namespace ts::server
