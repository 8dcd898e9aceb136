#include "server/response_job.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <chrono>

#include "api/engine_mapping.h"
#include "api/error.h"
#include "api/response_format.h"

namespace ts::server {

namespace {

int finish_rank(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kError: return 4;
    case engine::FinishReason::kCancelled: return 3;
    case engine::FinishReason::kLength: return 2;
    case engine::FinishReason::kStop: return 1;
    case engine::FinishReason::kNone: return 0;
  }
  return 0;
}

bool is_set(engine::TimePoint t) { return t != engine::TimePoint{}; }

// Earliest of the set points (or the later one when only it is set).
void keep_earliest(engine::TimePoint* acc, engine::TimePoint t) {
  if (is_set(t) && (!is_set(*acc) || t < *acc)) *acc = t;
}

}  // namespace

ResponseJob::ResponseJob(JobSpec spec, http::ExchangePtr exchange,
                         std::vector<std::shared_ptr<engine::RequestHandle>> handles,
                         const tokenizer::Tokenizer& tok,
                         std::function<void(const JobResult&)> on_done)
    : spec_(std::move(spec)),
      exchange_(std::move(exchange)),
      handles_(std::move(handles)),
      done_(handles_.size(), false),
      usage_(handles_.size()),
      timings_(handles_.size()),
      choices_(handles_.size() * static_cast<size_t>(spec_.n)),
      tok_(&tok),
      on_done_(std::move(on_done)) {
  if (spec_.chat && spec_.output_parser.active()) {
    markers_ = spec_.output_parser.markers();
    for (ChoiceState& c : choices_) {
      c.parser = std::make_shared<api::OutputStreamParser>(spec_.output_parser);
      if (!spec_.output_prefill.empty()) (void)c.parser->push(spec_.output_prefill);  // held: an opener
    }
  }
}

// The engine gives control tokens no text; a marker among them is appended after the event's
// text. Known limit: text the engine still holds back (a possible stop string, an incomplete
// UTF-8 character) when a marker token arrives comes after the marker.
std::string ResponseJob::raw_text(std::string text, const engine::Event& ev) const {
  std::string raw = std::move(text);
  for (int32_t id : ev.token_ids) {
    if (!tok_->is_control(id) || tok_->is_eog(id)) continue;
    std::string t = tok_->token_bytes(id);
    if (std::find(markers_.begin(), markers_.end(), t) != markers_.end()) raw += t;
  }
  return raw;
}

void ResponseJob::on_parsed(ChoiceState& c, int32_t index, const api::OutputDelta& d,
                            std::vector<api::TokenLogprobs> lps, std::string* out) {
  if (!spec_.stream) {
    c.text += d.content;
    c.reasoning += d.reasoning;
    for (const api::ToolCallDelta& t : d.calls) {
      if (!t.id.empty()) c.calls.push_back(api::ToolCallOut{.id = t.id, .name = t.name, .arguments = ""});
      else if (static_cast<size_t>(t.index) < c.calls.size()) c.calls[static_cast<size_t>(t.index)].arguments += t.arguments;
    }
    for (auto& l : lps) c.logprobs.push_back(std::move(l));
    return;
  }
  if (!d.content.empty() || !d.reasoning.empty() || !lps.empty()) {
    api::Choice ch{.index = index, .text = d.content, .reasoning = {}, .tool_calls = {},
                   .finish = api::FinishReason::kNull, .has_logprobs = spec_.logprobs && !lps.empty(),
                   .logprobs = std::move(lps), .text_offset_base = 0};
    if (!d.reasoning.empty()) ch.reasoning = d.reasoning;
    *out += api::sse_event(api::chat_content_chunk(spec_.meta, ch, spec_.include_usage));
  }
  // One chunk per delta, as OpenAI streams them: the call's header, then its arguments.
  for (const api::ToolCallDelta& t : d.calls)
    *out += api::sse_event(api::chat_tool_call_chunk(spec_.meta, index, {t}, spec_.include_usage));
}

void ResponseJob::begin() {
  auto handles = handles_;
  exchange_->on_cancel([handles] {
    for (const auto& h : handles) h->cancel();
  });
  if (!spec_.stream) return;
  http::HeaderList headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  for (const auto& h : spec_.headers) headers.push_back(h);
  exchange_->start_stream(200, "text/event-stream; charset=utf-8", std::move(headers));
  if (spec_.chat) {
    std::string first;
    for (size_t i = 0; i < choices_.size(); ++i)
      first += api::sse_event(api::chat_role_chunk(spec_.meta, static_cast<int32_t>(i), spec_.include_usage));
    exchange_->write(std::move(first));
  }
}

api::TokenLogprobs ResponseJob::to_logprobs(const engine::LogprobEntry& e) const {
  api::TokenLogprobs t;
  t.token = tok_->token_bytes(e.sampled.token);
  t.logprob = e.sampled.logprob;
  for (const auto& alt : e.top) t.top.push_back(api::TopLogprob{tok_->token_bytes(alt.token), alt.logprob});
  return t;
}

void ResponseJob::listen(const std::shared_ptr<engine::detail::Waker>& waker) {
  for (const auto& h : handles_) h->set_listener(waker);
}

void ResponseJob::unlisten() {
  for (const auto& h : handles_) h->set_listener(nullptr);
}

void ResponseJob::on_event(size_t prompt, engine::Event& ev) {
  size_t idx = prompt * static_cast<size_t>(spec_.n) + static_cast<size_t>(ev.index);
  if (idx >= choices_.size()) return;
  ChoiceState& c = choices_[idx];
  if (!ev.token_ids.empty()) {
    const engine::TimePoint t = is_set(ev.time) ? ev.time : engine::Clock::now();
    if (is_set(c.last_token)) gaps_.push_back(std::max(engine::Clock::duration::zero(), t - c.last_token));
    gaps_.insert(gaps_.end(), ev.token_ids.size() - 1, std::chrono::duration<double>::zero());
    c.last_token = t;
  }
  if (ev.finish == engine::FinishReason::kCancelled) saw_cancelled_ = true;
  if (finish_rank(ev.finish) > finish_rank(worst_finish_)) worst_finish_ = ev.finish;
  if (ev.request_done) {
    done_[prompt] = true;
    usage_[prompt] = ev.usage;
    timings_[prompt] = ev.timings;
  }
  // A client that left gets nothing more; the events still count for usage.
  if (exchange_->cancelled()) return;
  if (ev.finish == engine::FinishReason::kError && error_.ok())
    error_ = ev.error.ok() ? internal_error("generation failed") : ev.error;

  std::string text = std::move(ev.text);
  if (spec_.capture_output) c.captured += text;
  if (!c.started && !spec_.echo.empty() && (!text.empty() || ev.finish != engine::FinishReason::kNone)) {
    text = spec_.echo[prompt] + text;
  }
  std::vector<api::TokenLogprobs> lps;
  if (spec_.logprobs)
    for (const auto& e : ev.logprobs) lps.push_back(to_logprobs(e));
  api::FinishReason finish = api::finish_from_engine(ev.finish);

  if (c.parser) {
    bool ended = ev.finish != engine::FinishReason::kNone;
    std::string out;
    api::OutputDelta d = c.parser->push(raw_text(text, ev));
    // Reasoning tokens: those generated before the answer (content or a call) started.
    if (!c.parser->answer_started() && spec_.output_parser.reasoning != api::ReasoningFormat::kNone)
      c.reasoning_tokens += static_cast<int64_t>(ev.token_ids.size());
    if (ended && ev.finish != engine::FinishReason::kError && ev.finish != engine::FinishReason::kCancelled) {
      api::OutputDelta rest = c.parser->finish();
      d.content += rest.content;
      d.reasoning += rest.reasoning;
      for (auto& t : rest.calls) d.calls.push_back(std::move(t));
    }
    if (finish == api::FinishReason::kStop && c.parser->num_calls() > 0) finish = api::FinishReason::kToolCalls;
    on_parsed(c, static_cast<int32_t>(idx), d, std::move(lps), &out);
    if (spec_.stream && ended && ev.finish != engine::FinishReason::kError)
      out += api::sse_event(api::chat_finish_chunk(spec_.meta, static_cast<int32_t>(idx), finish, spec_.include_usage));
    if (!out.empty()) exchange_->write(std::move(out));
    c.started = true;
    if (ended) c.finish = finish;
    return;
  }

  if (spec_.stream) {
    bool has_delta = !text.empty() || !lps.empty();
    api::Choice d{.index = static_cast<int32_t>(idx), .text = text, .finish = api::FinishReason::kNull,
                  .has_logprobs = spec_.logprobs && !lps.empty(), .logprobs = lps,
                  .text_offset_base = c.text_bytes};
    std::string out;
    if (spec_.chat) {
      if (has_delta) out += api::sse_event(api::chat_content_chunk(spec_.meta, d, spec_.include_usage));
      if (ev.finish != engine::FinishReason::kNone && ev.finish != engine::FinishReason::kError)
        out += api::sse_event(api::chat_finish_chunk(spec_.meta, d.index, finish, spec_.include_usage));
    } else if (has_delta || ev.finish != engine::FinishReason::kNone) {
      if (ev.finish != engine::FinishReason::kError) d.finish = finish;
      if (has_delta || d.finish != api::FinishReason::kNull)
        out += api::sse_event(api::completion_chunk(spec_.meta, d, spec_.include_usage));
    }
    if (!out.empty()) exchange_->write(std::move(out));
  } else {
    c.text += text;
    for (auto& l : lps) c.logprobs.push_back(std::move(l));
  }
  if (!text.empty() || ev.finish != engine::FinishReason::kNone) c.started = true;
  c.text_bytes += static_cast<int64_t>(text.size());
  if (ev.finish != engine::FinishReason::kNone) c.finish = finish;
}

std::string ResponseJob::with_extensions(std::string body) const {
  if (spec_.body_extension.empty() && spec_.usage_extension.empty()) return body;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!j.is_object()) return body;
  nlohmann::ordered_json top = nlohmann::ordered_json::parse(spec_.body_extension, nullptr, false);
  nlohmann::ordered_json usage = nlohmann::ordered_json::parse(spec_.usage_extension, nullptr, false);
  if (top.is_object())
    for (auto it = top.begin(); it != top.end(); ++it) j[it.key()] = it.value();
  if (usage.is_object() && j.contains("usage") && j["usage"].is_object())
    for (auto it = usage.begin(); it != usage.end(); ++it) j["usage"][it.key()] = it.value();
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

JobResult ResponseJob::result() const {
  JobResult result;
  for (size_t p = 0; p < usage_.size(); ++p) {
    const engine::Usage& u = usage_[p];
    result.usage.prompt_tokens += u.prompt_tokens;
    result.usage.completion_tokens += u.completion_tokens;
    result.usage.cached_tokens += u.cached_tokens;
    const engine::Timings& t = timings_[p];
    keep_earliest(&result.timings.arrival, t.arrival);
    keep_earliest(&result.timings.scheduled, t.scheduled);
    keep_earliest(&result.timings.first_token, t.first_token);
    if (is_set(t.finished) && t.finished > result.timings.finished) result.timings.finished = t.finished;
    result.timings.num_preemptions += t.num_preemptions;
  }
  if (spec_.chat && spec_.output_parser.reasoning != api::ReasoningFormat::kNone) {
    int64_t r = 0;
    for (const ChoiceState& c : choices_) r += c.reasoning_tokens;
    result.usage.reasoning_tokens = r;
  }
  result.usage.prompt_tokens += spec_.extra_usage.prompt_tokens;
  result.usage.completion_tokens += spec_.extra_usage.completion_tokens;
  result.usage.cached_tokens += spec_.extra_usage.cached_tokens;
  result.error = !error_.ok();
  if (!error_.ok()) result.error_message = error_.message();
  result.cancelled = saw_cancelled_ || exchange_->cancelled();
  result.finish = worst_finish_;
  if (spec_.capture_output && !choices_.empty()) result.output_text = choices_[0].captured;
  result.inter_token_gaps = gaps_;
  if (exchange_->cancelled() && result.finish != engine::FinishReason::kError)
    result.finish = engine::FinishReason::kCancelled;
  if (spec_.stream) {
    result.http_status = 200;
  } else if (exchange_->cancelled()) {
    result.http_status = 499;  // nginx's "client closed request": nothing was sent
  } else if (!error_.ok()) {
    result.http_status = api::error_from_status(error_).http_status;
  }
  return result;
}

void ResponseJob::finish_job() {
  over_ = true;
  unlisten();
  JobResult result = this->result();
  // Settle first: a client that sends its next request as soon as this response arrives then
  // finds the unused reservation already refunded.
  if (on_done_) on_done_(result);
  if (exchange_->cancelled()) {
    // Nothing to send: the client is gone.
  } else if (spec_.stream) {
    std::string out;
    if (!error_.ok()) out += api::sse_event(api::error_from_status(error_).to_json());
    if (spec_.include_usage)
      out += api::sse_event(with_extensions(api::usage_chunk(spec_.meta, spec_.chat, result.usage)));
    else if (!spec_.body_extension.empty())
      out += "event: context_overflow\ndata: " + spec_.body_extension + "\n\n";
    out += api::kSseDone;
    exchange_->write(std::move(out));
    exchange_->finish();
  } else if (!error_.ok()) {
    api::ApiError e = api::error_from_status(error_);
    http::Response r;
    r.status = e.http_status;
    r.body = e.to_json();
    for (const auto& h : spec_.headers) r.set_header(h.first, h.second);
    exchange_->respond(std::move(r));
  } else {
    std::vector<api::Choice> out;
    out.reserve(choices_.size());
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChoiceState& c = choices_[i];
      int64_t echo_len = spec_.echo.empty() ? 0 : static_cast<int64_t>(spec_.echo[i / spec_.n].size());
      out.push_back(api::Choice{.index = static_cast<int32_t>(i), .text = std::move(c.text),
                                .reasoning = {}, .tool_calls = std::move(c.calls),
                                .finish = c.finish, .has_logprobs = spec_.logprobs,
                                .logprobs = std::move(c.logprobs), .text_offset_base = echo_len});
      if (c.parser && spec_.output_parser.reasoning != api::ReasoningFormat::kNone && !c.reasoning.empty())
        out.back().reasoning = std::move(c.reasoning);
    }
    http::Response r;
    r.body = with_extensions(spec_.chat ? api::chat_completion_body(spec_.meta, out, result.usage)
                                        : api::completion_body(spec_.meta, out, result.usage));
    for (const auto& h : spec_.headers) r.set_header(h.first, h.second);
    exchange_->respond(std::move(r));
  }
}

void ResponseJob::abandon() {
  if (over_) return;
  for (const auto& h : handles_) h->cancel();
  over_ = true;
  unlisten();
  JobResult result = this->result();
  result.cancelled = true;
  if (result.finish != engine::FinishReason::kError) result.finish = engine::FinishReason::kCancelled;
  if (!spec_.stream) result.http_status = 503;  // the server went away before answering
  if (on_done_) on_done_(result);
}

bool ResponseJob::pump(bool* progressed) {
  if (over_) return true;
  if (exchange_->cancelled() && !cancel_deadline_) {
    // The client left: stop generating, but keep taking events until every handle's final
    // one, which carries the usage so far.
    for (const auto& h : handles_) h->cancel();
    cancel_deadline_ = std::chrono::steady_clock::now() + kCancelGrace;
  }
  bool all_done = true;
  for (size_t p = 0; p < handles_.size(); ++p) {
    // Bounded per call so one busy job does not starve the others.
    for (int k = 0; k < 64 && !done_[p]; ++k) {
      std::optional<engine::Event> ev = handles_[p]->next(std::chrono::milliseconds(0));
      if (!ev) break;
      *progressed = true;
      on_event(p, *ev);
    }
    if (!done_[p]) all_done = false;
  }
  if (all_done) {
    finish_job();
  } else if (cancel_deadline_ && std::chrono::steady_clock::now() > *cancel_deadline_) {
    abandon();
  }
  return over_;
}

// ------------------------------------------------------------------------------------------

ResponsePump::ResponsePump()
    : waker_(std::make_shared<engine::detail::Waker>()), thread_([this] { loop(); }) {}

ResponsePump::~ResponsePump() { stop(); }

void ResponsePump::add(std::shared_ptr<ResponseJob> job) {
  job->listen(waker_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(std::move(job));
    num_jobs_.fetch_add(1);
  }
  waker_->notify();
}

void ResponsePump::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  waker_->notify();
  if (thread_.joinable()) thread_.join();
}

void ResponsePump::loop() {
  using SteadyClock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<ResponseJob>> jobs;
  std::optional<SteadyClock::time_point> stop_deadline;  // stopping: when jobs left are dropped
  while (true) {
    // Clear the wake flag before pumping: whatever is pushed from here on wakes the next wait.
    {
      std::lock_guard<std::mutex> l(waker_->mu);
      waker_->pending = false;
    }
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& j : incoming_) jobs.push_back(std::move(j));
      incoming_.clear();
      stopping = stopping_;
    }
    if (stopping && jobs.empty()) return;
    num_rounds_.fetch_add(1, std::memory_order_relaxed);
    bool progressed = false;
    for (size_t i = 0; i < jobs.size();) {
      if (jobs[i]->pump(&progressed)) {
        jobs[i] = std::move(jobs.back());
        jobs.pop_back();
        num_jobs_.fetch_sub(1);
      } else {
        ++i;
      }
    }
    if (stopping && !jobs.empty()) {
      // Stopping: the engine has been told to stop; give jobs ~2 s without any event, then drop them.
      if (progressed || !stop_deadline) stop_deadline = SteadyClock::now() + std::chrono::seconds(2);
      if (SteadyClock::now() >= *stop_deadline) {
        for (auto& j : jobs) j->abandon();
        num_jobs_.fetch_sub(jobs.size());
        jobs.clear();
        continue;
      }
    }
    if (progressed) continue;  // more may be ready (pump() takes at most 64 events a handle)
    SteadyClock::time_point until = SteadyClock::time_point::max();  // max = no timed wake
    if (stopping && stop_deadline) until = *stop_deadline;
    for (const auto& j : jobs) {
      if (auto d = j->wake_deadline(); d && *d < until) until = *d;
    }
    std::unique_lock<std::mutex> l(waker_->mu);
    if (until != SteadyClock::time_point::max()) {
      waker_->cv.wait_until(l, until, [this] { return waker_->pending; });
    } else {
      waker_->cv.wait(l, [this] { return waker_->pending; });
    }
  }
}

}  // namespace ts::server
