// The load generator's run loop (see bench.h). Threads: the caller monitors the stop flag,
// deadlines and progress; one launcher thread runs either N closed-loop clients or an arrival
// dispatcher feeding a growing pool of client threads; every client does one blocking
// streaming request at a time. Records are collected under one mutex.
#include "tools/bench.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tools/bench_workload.h"
#include "net/http_client.h"

namespace ts::tools {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using namespace net;  // the shared HTTP client (src/net)

constexpr int64_t kMaxPrebuiltPrompts = 4096;

std::chrono::nanoseconds secs(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

class Runner {
 public:
  Runner(const BenchOptions& o, Url url, Workload w, std::unique_ptr<PromptBuilder> pb)
      : o_(o), url_(std::move(url)), w_(std::move(w)), pb_(std::move(pb)) {}

  Result<BenchReport> run();
  Status prepare_prompts(int64_t count);

 private:
  double now_s() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  RequestRecord run_one(int64_t index, double scheduled_s);
  void add(RequestRecord r);
  void closed_loop();
  void open_loop();
  void open_worker();
  void print_progress(bool final_line);

  const BenchOptions& o_;
  Url url_;
  Workload w_;
  std::unique_ptr<PromptBuilder> pb_;
  std::vector<Prompt> prompts_;  // prebuilt, by index
  int64_t max_requests_ = std::numeric_limits<int64_t>::max();

  Clock::time_point t0_;
  Clock::time_point send_deadline_ = Clock::time_point::max();
  Clock::time_point hard_deadline_ = Clock::time_point::max();
  std::atomic<bool> stop_sending_{false};
  std::atomic<bool> abort_{false};  // cancels in-flight requests
  std::atomic<int64_t> next_index_{0}, num_sent_{0}, num_done_{0}, num_failed_{0}, out_tokens_{0};

  std::mutex mu_;
  std::vector<RequestRecord> records_;

  // Open loop: arrivals waiting for a client thread.
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<std::pair<int64_t, double>> queue_;  // (index, scheduled_s)
  bool dispatch_done_ = false;
  int32_t idle_workers_ = 0;
  std::vector<std::thread> workers_;
};

Status Runner::prepare_prompts(int64_t count) {
  count = std::min(count, kMaxPrebuiltPrompts);
  prompts_.resize(static_cast<size_t>(count));
  std::atomic<int64_t> next{0};
  std::mutex err_mu;
  Status err;
  auto work = [&] {
    for (int64_t i; (i = next++) < count;) {
      if (o_.stop && o_.stop->load()) {
        std::lock_guard lk(err_mu);
        err = Status(StatusCode::kCancelled, "interrupted while preparing prompts");
        return;
      }
      auto p = pb_->build(w_.at(i).input_tokens, static_cast<uint64_t>(i));
      if (!p.ok()) {
        std::lock_guard lk(err_mu);
        err = p.status();
        next = count;
        return;
      }
      prompts_[static_cast<size_t>(i)] = std::move(p).value();
    }
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < (pb_->exact() ? 4 : 1); ++t) ts.emplace_back(work);
  for (auto& t : ts) t.join();
  return err;
}

void Runner::add(RequestRecord r) {
  if (r.ok) out_tokens_ += r.output_tokens;
  if (!r.ok && !r.cancelled) ++num_failed_;
  ++num_done_;
  std::lock_guard lk(mu_);
  records_.push_back(std::move(r));
}

RequestRecord Runner::run_one(int64_t index, double scheduled_s) {
  RequestRecord rec;
  RequestSpec spec = w_.at(index);
  rec.index = index;
  rec.tier = spec.tier;
  rec.target_input_tokens = spec.input_tokens;
  rec.target_output_tokens = spec.output_tokens;
  rec.scheduled_s = scheduled_s;

  Prompt prompt;
  if (index < static_cast<int64_t>(prompts_.size())) {
    prompt = prompts_[static_cast<size_t>(index)];
  } else {
    auto p = pb_->build(spec.input_tokens, static_cast<uint64_t>(index));
    if (!p.ok()) {
      rec.start_s = rec.end_s = now_s();
      rec.error = "tokenize";
      rec.error_message = p.status().message();
      return rec;
    }
    prompt = std::move(p).value();
  }

  json body = {{"model", o_.model},
               {"prompt", prompt.text},
               {"max_tokens", spec.output_tokens},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (o_.ignore_eos) body["ignore_eos"] = true;
  if (!spec.tier.empty()) body["tier"] = spec.tier;
  HttpRequest req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!o_.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + o_.api_key);
  req.body = body.dump();

  const Clock::time_point start = Clock::now();
  HttpCallOptions call;
  call.deadline = std::min(hard_deadline_, start + secs(o_.request_timeout_s));
  call.cancel = &abort_;
  rec.start_s = now_s();
  ++num_sent_;

  SseParser sse;
  std::string error_body, stream_error;
  bool protocol_error = false, have_first = false;
  double last_chunk_s = 0;
  int64_t usage_prompt = -1, usage_completion = -1;
  auto on_event = [&](const SseEvent& ev) {
    const double t = now_s();
    if (ev.data == "[DONE]") return;
    json j = json::parse(ev.data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      protocol_error = true;
      return;
    }
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
      stream_error = e->is_object() ? e->value("message", e->dump()) : e->dump();
      return;
    }
    if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
      const json& ch = (*c)[0];
      std::string text;
      if (auto tx = ch.find("text"); tx != ch.end() && tx->is_string()) text = tx->get<std::string>();
      else if (auto d = ch.find("delta"); d != ch.end() && d->is_object() && d->contains("content") &&
                                          (*d)["content"].is_string())
        text = (*d)["content"].get<std::string>();
      const bool finishing = ch.contains("finish_reason") && !ch["finish_reason"].is_null();
      if (!text.empty() || !finishing) {  // a token event (a bare finish marker is not)
        if (!have_first) {
          rec.ttft_ms = (t - rec.start_s) * 1e3;
          have_first = true;
        } else {
          rec.itl_ms.push_back((t - last_chunk_s) * 1e3);
        }
        last_chunk_s = t;
        rec.chunk_s.push_back(t);
        ++rec.num_chunks;
      }
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer()) usage_prompt = p->get<int64_t>();
      if (auto p = u->find("completion_tokens"); p != u->end() && p->is_number_integer())
        usage_completion = p->get<int64_t>();
    }
  };
  HttpHandlers h;
  h.on_head = [&](const HttpResponseHead& head) {
    rec.http_status = head.status;
    return true;
  };
  h.on_body = [&](std::string_view data) {
    if (rec.http_status != 200) {
      if (error_body.size() < 2048) error_body.append(data.substr(0, 2048 - error_body.size()));
    } else {
      sse.feed(data, on_event);
    }
    return true;
  };
  auto head = http_stream(url_, req, call, h);
  rec.end_s = now_s();
  rec.e2e_ms = (rec.end_s - rec.start_s) * 1e3;

  if (!head.ok()) {
    const StatusCode code = head.status().code();
    rec.error_message = head.status().message();
    if (code == StatusCode::kCancelled || (code == StatusCode::kDeadlineExceeded && Clock::now() >= hard_deadline_)) {
      rec.cancelled = true;
    } else if (code == StatusCode::kDeadlineExceeded) {
      rec.error = "timeout";
    } else if (code == StatusCode::kUnavailable) {
      rec.error = "connection";
    } else {
      rec.error = "protocol";
    }
    return rec;
  }
  if (rec.http_status != 200) {
    rec.error = std::to_string(rec.http_status);
    json e = json::parse(error_body, nullptr, false);
    if (!e.is_discarded() && e.is_object() && e.contains("error") && e["error"].is_object())
      rec.error_message = e["error"].value("message", error_body);
    else
      rec.error_message = error_body.substr(0, 200);
    return rec;
  }
  if (!stream_error.empty() || protocol_error) {
    rec.error = stream_error.empty() ? "protocol" : "stream_error";
    rec.error_message = stream_error.empty() ? "malformed SSE data" : stream_error;
    return rec;
  }
  rec.ok = true;
  rec.usage_reported = usage_completion >= 0;
  rec.output_tokens = usage_completion >= 0 ? usage_completion : rec.num_chunks;
  rec.prompt_tokens = usage_prompt >= 0 ? usage_prompt
                      : prompt.measured_tokens >= 0 ? prompt.measured_tokens
                                                    : spec.input_tokens;
  if (!have_first) rec.ttft_ms = rec.e2e_ms;
  if (rec.output_tokens > 1) rec.tpot_ms = (rec.e2e_ms - rec.ttft_ms) / static_cast<double>(rec.output_tokens - 1);
  return rec;
}

void Runner::closed_loop() {
  std::vector<std::thread> clients;
  for (int32_t c = 0; c < o_.concurrency; ++c) {
    clients.emplace_back([this] {
      for (;;) {
        if (stop_sending_ || Clock::now() >= send_deadline_) return;
        const int64_t i = next_index_++;
        if (i >= max_requests_) return;
        add(run_one(i, now_s()));
      }
    });
  }
  for (auto& t : clients) t.join();
}

void Runner::open_worker() {
  for (;;) {
    std::pair<int64_t, double> item;
    {
      std::unique_lock lk(qmu_);
      ++idle_workers_;
      qcv_.wait(lk, [&] { return !queue_.empty() || dispatch_done_; });
      --idle_workers_;
      if (queue_.empty()) return;
      item = queue_.front();
      queue_.pop_front();
    }
    if (abort_) continue;  // drain the queue without sending
    add(run_one(item.first, item.second));
  }
}

void Runner::open_loop() {
  std::mt19937_64 rng(o_.seed);
  std::exponential_distribution<double> gap(o_.rate > 0 ? o_.rate : 1.0);
  const bool use_offsets = w_.is_replay() && o_.rate <= 0;
  double t = 0;
  for (int64_t i = 0; i < max_requests_; ++i) {
    t = use_offsets ? w_.at(i).offset_s : t + gap(rng);
    if (o_.duration_s > 0 && t >= o_.duration_s) break;
    const Clock::time_point due = t0_ + secs(t);
    while (!stop_sending_ && Clock::now() < due)
      std::this_thread::sleep_for(std::min<Clock::duration>(due - Clock::now(), std::chrono::milliseconds(20)));
    if (stop_sending_) break;
    std::lock_guard lk(qmu_);
    queue_.emplace_back(i, t);
    if (idle_workers_ == 0 && static_cast<int32_t>(workers_.size()) < o_.max_inflight)
      workers_.emplace_back([this] { open_worker(); });
    qcv_.notify_one();
  }
  {
    std::lock_guard lk(qmu_);
    dispatch_done_ = true;
  }
  qcv_.notify_all();
  for (auto& w : workers_) w.join();  // workers_ no longer grows
}

void Runner::print_progress(bool final_line) {
  if (!o_.progress) return;
  const double t = now_s();
  std::fprintf(o_.progress, "\r%7.1f s  sent %-6lld done %-6lld errors %-4lld in flight %-4lld %8.1f out tok/s ",
               t, static_cast<long long>(num_sent_.load()), static_cast<long long>(num_done_.load()),
               static_cast<long long>(num_failed_.load()),
               static_cast<long long>(num_sent_.load() - num_done_.load()),
               t > 0 ? static_cast<double>(out_tokens_.load()) / t : 0.0);
  if (final_line) std::fputc('\n', o_.progress);
  std::fflush(o_.progress);
}

Result<BenchReport> Runner::run() {
  if (o_.max_requests > 0) max_requests_ = o_.max_requests;
  if (w_.is_replay()) max_requests_ = std::min(max_requests_, w_.size());
  t0_ = Clock::now();
  if (o_.duration_s > 0) {
    send_deadline_ = t0_ + secs(o_.duration_s);
    hard_deadline_ = send_deadline_ + secs(std::max(0.0, o_.drain_s));
  }
  std::atomic<bool> finished{false};
  std::thread launcher([&] {
    if (o_.concurrency > 0) closed_loop();
    else open_loop();
    finished = true;
  });
  bool interrupted = false;
  auto last_progress = Clock::now();
  while (!finished) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto now = Clock::now();
    if (o_.stop && o_.stop->load() && !interrupted) {
      interrupted = true;
      stop_sending_ = true;
      abort_ = true;
    }
    if (now >= send_deadline_) stop_sending_ = true;
    if (now >= hard_deadline_) abort_ = true;
    if (now - last_progress >= std::chrono::milliseconds(500)) {
      print_progress(false);
      last_progress = now;
    }
  }
  launcher.join();
  print_progress(true);

  double elapsed = 0;
  for (const RequestRecord& r : records_) elapsed = std::max(elapsed, r.end_s);
  if (records_.empty()) elapsed = now_s();
  BenchReport rep = summarize_records(std::move(records_), elapsed, o_.slo_ttft_ms, o_.slo_tpot_ms);
  rep.url = o_.url;
  rep.model = o_.model;
  rep.scenario = w_.describe();
  if (o_.concurrency > 0) rep.mode = "closed loop, concurrency " + std::to_string(o_.concurrency);
  else if (o_.rate > 0) rep.mode = "poisson arrivals, " + json(o_.rate).dump() + " req/s";
  else rep.mode = "replay arrival offsets";
  if (o_.shared_prefix > 0) rep.mode += ", shared prefix " + std::to_string(pb_->shared_prefix_tokens()) + " tokens";
  rep.interrupted = interrupted;
  rep.prompts_exact = pb_->exact();
  return rep;
}

// Counts tokens with the server's POST /tokenize. The text goes in both "prompt" (tokenserve,
// vLLM) and "content" (llama-server, which ignores "prompt" and would count an empty text).
TokenCounter make_counter(const Url& url, const std::string& model, const std::string& api_key) {
  return [url, model, api_key](const std::string& text) -> Result<int64_t> {
    HttpRequest req;
    req.method = "POST";
    req.path = "/tokenize";
    req.headers = {{"Content-Type", "application/json"}};
    if (!api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + api_key);
    req.body = json{{"model", model}, {"prompt", text}, {"content", text}, {"add_special", true}}.dump();
    HttpCallOptions call;
    call.deadline = Clock::now() + std::chrono::seconds(30);
    TS_ASSIGN_OR_RETURN(HttpResult res, http_fetch(url, req, call));
    if (res.head.status != 200)
      return Status(StatusCode::kNotFound, "POST /tokenize answered " + std::to_string(res.head.status));
    json j = json::parse(res.body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
      return Status(StatusCode::kNotFound, "POST /tokenize answer has no \"tokens\" array");
    return static_cast<int64_t>(j["tokens"].size());
  };
}

}  // namespace

std::optional<double> parse_duration_ms(std::string_view s) {
  size_t num_end = 0;
  while (num_end < s.size() && (std::isdigit(static_cast<unsigned char>(s[num_end])) || s[num_end] == '.')) ++num_end;
  if (num_end == 0) return std::nullopt;
  double v = 0;
  try {
    v = std::stod(std::string(s.substr(0, num_end)));
  } catch (...) {
    return std::nullopt;
  }
  const std::string_view unit = s.substr(num_end);
  if (unit.empty() || unit == "ms") return v;
  if (unit == "s") return v * 1e3;
  if (unit == "us") return v * 1e-3;
  if (unit == "m" || unit == "min") return v * 60e3;
  return std::nullopt;
}

Result<BenchReport> run_bench(const BenchOptions& o) {
  TS_ASSIGN_OR_RETURN(Url url, parse_url(o.url));
  if (url.base_path.size() >= 3 && url.base_path.compare(url.base_path.size() - 3, 3, "/v1") == 0)
    url.base_path.resize(url.base_path.size() - 3);
  Workload::Options wo{.scenario = o.scenario, .input_tokens = o.input_tokens,
                       .output_tokens = o.output_tokens, .tier = o.tier, .seed = o.seed};
  TS_ASSIGN_OR_RETURN(Workload w, Workload::make(wo));
  if (o.concurrency > 0 && o.rate > 0) return invalid_argument("give --concurrency or --rate, not both");
  if (o.concurrency <= 0 && o.rate <= 0 && !w.is_replay())
    return invalid_argument("give --concurrency N (closed loop) or --rate R (Poisson arrivals)");
  if (o.max_requests <= 0 && o.duration_s <= 0 && !w.is_replay())
    return invalid_argument("give --requests M or --duration S: a run must be bounded");
  if (o.model.empty()) return invalid_argument("give --model");
  if (o.max_inflight < 1) return invalid_argument("max in-flight must be >= 1");

  std::unique_ptr<PromptBuilder> pb;
  if (o.use_tokenize) {
    pb = std::make_unique<PromptBuilder>(make_counter(url, o.model, o.api_key), o.seed, o.shared_prefix);
    Status st = pb->init();
    if (!st.ok()) {
      if (st.code() != StatusCode::kNotFound) return Status(st.code(), "preparing prompts: " + st.message());
      if (o.log) std::fprintf(o.log, "bench: %s; prompt lengths are approximate (1 word ~ 1 token)\n", st.message().c_str());
      pb.reset();
    }
  }
  if (!pb) {
    pb = std::make_unique<PromptBuilder>(TokenCounter(), o.seed, o.shared_prefix);
    TS_RETURN_IF_ERROR(pb->init());
  }
  int64_t expected = o.max_requests;
  if (expected <= 0 && o.rate > 0) expected = static_cast<int64_t>(o.rate * o.duration_s * 1.3) + 16;
  if (w.is_replay()) expected = expected > 0 ? std::min(expected, w.size()) : w.size();
  Runner runner(o, url, std::move(w), std::move(pb));
  if (expected > 0) {
    if (o.log) std::fprintf(o.log, "bench: preparing %lld prompts\n", static_cast<long long>(std::min(expected, kMaxPrebuiltPrompts)));
    Status st = runner.prepare_prompts(expected);
    if (!st.ok()) return Status(st.code(), "preparing prompts: " + st.message());
  }
  return runner.run();
}

}  // namespace ts::tools
