// One API request in flight: its engine handles (one per prompt) and the HTTP exchange it
// answers. pump() moves available engine events into SSE chunks (stream) or accumulates them
// into one JSON body, and answers when every handle is done. A client disconnect cancels every
// handle (through the exchange's cancel callback); the job then keeps taking events until every
// handle reports its final (cancelled) event, so the usage up to the disconnect is known, or
// until kCancelGrace passed. on_done runs exactly once per job, however it ends (also when the
// pump drops it at shutdown: abandon()).
//
// ResponsePump runs pump() for all jobs on one thread, so thousands of jobs need no thread each.
// It sleeps until something happens: every handle of its jobs has the pump's waker as listener
// (RequestHandle::set_listener), so an event pushed by the engine, a cancel (client disconnect)
// or a new job wakes it at once; the only timed wake is the earliest cancel grace deadline.
// Job: one thread at a time (the pump). ResponsePump: add()/stop() thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/tool_parser.h"
#include "api/types.h"
#include "engine/engine.h"
#include "http/message.h"
#include "tokenizer/tokenizer.h"

namespace ts::server {

struct JobSpec {
  bool chat = false;                 // chat.completion(.chunk) vs text_completion shapes
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  api::ResponseMeta meta;
  int32_t n = 1;                     // choices per prompt; choice index = prompt * n + i
  bool logprobs = false;             // put logprobs in the response
  std::vector<std::string> echo;     // completions with echo: each prompt's text, else empty
  http::HeaderList headers;          // sent with the response (x-request-id, x-ratelimit-* ...)
  // Chat only: how the model's output is split into content, reasoning_content and tool_calls
  // (inactive = the text is the content, as is). Control tokens whose text is one of the
  // config's markers are spliced back into the text the parser sees.
  api::OutputParserConfig output_parser;
  std::string output_prefill;        // assistant text already in the prompt (a forced call's
                                     // opener): fed to the parser before the model's output
  // context_overflow (context_overflow.h): usage of earlier steps (segment map windows) added to
  // what this job reports and settles, and JSON objects whose keys are merged into the response
  // body's top level / its "usage" object (streams: into the final usage chunk; without
  // include_usage the top-level object is sent as an `event: context_overflow` before [DONE]).
  api::UsageInfo extra_usage;
  std::string body_extension;        // "" = none
  std::string usage_extension;       // "" = none
  // Body logging (gateway/config.h log_bodies): keep the first choice's raw output text for
  // JobResult::output_text, streams included.
  bool capture_output = false;
  std::string logged_body;           // the request body to log when it differs from the HTTP
                                     // body (a registry prompt rendered into "messages")
};

// Totals a finished job reports (for metrics, the ledger and the request log).
struct JobResult {
  bool cancelled = false;            // client gone or the engine cancelled it
  bool error = false;
  api::UsageInfo usage;              // what was used, also when cancelled (as far as known)
  engine::Timings timings;           // over all prompts: earliest arrival/scheduled/first token,
                                     // latest finish, preemptions summed; unset points = epoch
  engine::FinishReason finish = engine::FinishReason::kNone;  // worst over choices
                                     // (error > cancelled > length > stop)
  int http_status = 200;             // status sent: 200 for streams (headers went first), the
                                     // error's status, or 499 when the client left before it
  std::string error_message;         // engine error, "" if none
  std::string output_text;           // first choice's raw output (spec.capture_output only)
  // Every gap between consecutive tokens of each choice, as the engine emitted them (the event's
  // time; the pump's receive time for backends that do not stamp events). Tokens that came in
  // one event (speculative decoding) have gaps of 0. One choice with N tokens gives N - 1 gaps.
  std::vector<std::chrono::duration<double>> inter_token_gaps;
};

class ResponseJob {
 public:
  ResponseJob(JobSpec spec, http::ExchangePtr exchange,
              std::vector<std::shared_ptr<engine::RequestHandle>> handles,
              const tokenizer::Tokenizer& tok, std::function<void(const JobResult&)> on_done);

  // Starts the SSE response (stream) and hooks cancellation. Call once, before the first pump.
  void begin();
  // Makes `waker` the listener of every handle (see RequestHandle::set_listener).
  void listen(const std::shared_ptr<engine::detail::Waker>& waker);
  // When the job must be pumped even without an event (its cancel grace ends); nullopt = never.
  std::optional<std::chrono::steady_clock::time_point> wake_deadline() const { return cancel_deadline_; }
  // Takes what events are ready. Returns true once the job is over (answered or cancelled).
  // *progressed is set when any event was taken.
  bool pump(bool* progressed);
  // Ends the job now if it is not over (the pump is shutting down): cancels its handles and
  // reports what is known through on_done. Idempotent.
  void abandon();

  // How long a cancelled job waits for its handles' final events before reporting anyway.
  static constexpr std::chrono::milliseconds kCancelGrace{3000};

 private:
  struct ChoiceState {
    std::string text;
    std::string reasoning;
    std::vector<api::ToolCallOut> calls;
    std::shared_ptr<api::OutputStreamParser> parser;  // when spec_.output_parser is active
    int64_t reasoning_tokens = 0;    // tokens generated before the answer started
    std::vector<api::TokenLogprobs> logprobs;
    api::FinishReason finish = api::FinishReason::kNull;
    bool started = false;            // first delta sent (echo prefix goes there)
    int64_t text_bytes = 0;          // text so far (completions' text_offset)
    std::string captured;            // raw output kept for body logging (capture_output)
    engine::TimePoint last_token;    // when its latest token was emitted; epoch = none yet
  };
  void on_event(size_t prompt, engine::Event& ev);
  // Splits raw output through the choice's parser; streams or accumulates what became certain.
  void on_parsed(ChoiceState& c, int32_t index, const api::OutputDelta& d,
                 std::vector<api::TokenLogprobs> lps, std::string* out);
  // The event's text (already taken from it) with spliced control-token markers.
  std::string raw_text(std::string text, const engine::Event& ev) const;
  void finish_job();
  void unlisten();
  JobResult result() const;
  std::string with_extensions(std::string body) const;  // spec_.body_extension / usage_extension merged
  api::TokenLogprobs to_logprobs(const engine::LogprobEntry& e) const;

  JobSpec spec_;
  http::ExchangePtr exchange_;
  std::vector<std::shared_ptr<engine::RequestHandle>> handles_;
  std::vector<bool> done_;
  std::vector<engine::Usage> usage_;
  std::vector<engine::Timings> timings_;
  engine::FinishReason worst_finish_ = engine::FinishReason::kNone;
  std::optional<std::chrono::steady_clock::time_point> cancel_deadline_;
  std::vector<ChoiceState> choices_;
  const tokenizer::Tokenizer* tok_;
  std::vector<std::string> markers_;  // spec_.output_parser.markers()
  std::function<void(const JobResult&)> on_done_;
  Status error_;
  bool saw_cancelled_ = false;       // a choice ended with FinishReason::kCancelled
  bool over_ = false;
  std::vector<std::chrono::duration<double>> gaps_;  // JobResult::inter_token_gaps
};

class ResponsePump {
 public:
  ResponsePump();
  ~ResponsePump();  // stop()
  // Takes the job; begin() must have been called.
  void add(std::shared_ptr<ResponseJob> job);
  // Pumps until every job is over (or ~2 s pass without any event), then ends the thread;
  // jobs left are dropped (their exchanges answer 500 or are closed already). Idempotent.
  void stop();
  size_t num_jobs() const { return num_jobs_.load(); }
  // Rounds of the pump loop so far (each pumps every job once); it sleeps between rounds until
  // an event, a cancel, a new job or a deadline. For tests and diagnostics.
  uint64_t num_rounds() const { return num_rounds_.load(); }

 private:
  void loop();
  mutable std::mutex mu_;
  std::shared_ptr<engine::detail::Waker> waker_;  // every job's handles notify it; add/stop too
  std::vector<std::shared_ptr<ResponseJob>> incoming_;
  bool stopping_ = false;
  std::atomic<size_t> num_jobs_{0};
  std::atomic<uint64_t> num_rounds_{0};
  std::thread thread_;
};

}  // namespace ts::server
