// context_overflow: the pure helpers, and the OpenAIService members that apply a policy
// (declared in openai_service.h, kept here so the service file stays about requests in general).
#include "server/context_overflow.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "api/engine_mapping.h"
#include "api/error.h"
#include "api/response_format.h"
#include "server/openai_service.h"

namespace ts::server {

using json = nlohmann::json;

const char* overflow_mode_name(OverflowMode m) {
  switch (m) {
    case OverflowMode::kError: return "error";
    case OverflowMode::kTruncateLeft: return "truncate_left";
    case OverflowMode::kTruncateMiddle: return "truncate_middle";
    case OverflowMode::kSegment: return "segment";
  }
  return "?";
}

Result<OverflowPolicy> parse_context_overflow(const std::string& body) {
  OverflowPolicy p;
  if (body.find("context_overflow") == std::string::npos) return p;
  json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("context_overflow") || j["context_overflow"].is_null()) return p;
  const json& v = j["context_overflow"];
  p.from_request = true;
  const char* kModes = "expected \"error\", \"truncate_left\", \"truncate_middle\" or {\"mode\": \"segment\", ...}";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "error") p.mode = OverflowMode::kError;
    else if (s == "truncate_left") p.mode = OverflowMode::kTruncateLeft;
    else if (s == "truncate_middle") p.mode = OverflowMode::kTruncateMiddle;
    else if (s == "segment") return invalid_argument("'context_overflow' segment mode needs {\"mode\": \"segment\", \"window\": W, \"overlap\": O}");
    else return invalid_argument("unknown 'context_overflow' mode \"" + s + "\": " + kModes);
    return p;
  }
  if (!v.is_object()) return invalid_argument(std::string("'context_overflow' must be a string or an object: ") + kModes);
  if (!v.contains("mode") || !v["mode"].is_string() || v["mode"].get<std::string>() != "segment")
    return invalid_argument(std::string("'context_overflow.mode' must be \"segment\" in the object form: ") + kModes);
  p.mode = OverflowMode::kSegment;
  auto integer = [&](const char* name, int64_t* out, bool required) -> Status {
    if (!v.contains(name)) return required ? invalid_argument(std::string("'context_overflow.") + name + "' is required")
                                           : ok_status();
    if (!v[name].is_number_integer()) return invalid_argument(std::string("'context_overflow.") + name + "' must be an integer");
    *out = v[name].get<int64_t>();
    return ok_status();
  };
  TS_RETURN_IF_ERROR(integer("window", &p.window, true));
  TS_RETURN_IF_ERROR(integer("overlap", &p.overlap, false));
  if (p.window < 1) return invalid_argument("'context_overflow.window' must be >= 1");
  if (p.overlap < 0) return invalid_argument("'context_overflow.overlap' must be >= 0");
  if (p.overlap >= p.window)
    return invalid_argument("'context_overflow.overlap' (" + std::to_string(p.overlap) + ") must be smaller than the window (" +
                            std::to_string(p.window) + ")");
  if (v.contains("map_max_tokens")) {
    int64_t m = 0;
    TS_RETURN_IF_ERROR(integer("map_max_tokens", &m, false));
    if (m < 1) return invalid_argument("'context_overflow.map_max_tokens' must be >= 1");
    p.map_max_tokens = m;
  }
  for (auto [name, out] : {std::pair{"map_prompt", &p.map_prompt}, std::pair{"reduce_prompt", &p.reduce_prompt}}) {
    if (!v.contains(name)) continue;
    if (!v[name].is_string() || v[name].get<std::string>().empty())
      return invalid_argument(std::string("'context_overflow.") + name + "' must be a non-empty string");
    *out = v[name].get<std::string>();
  }
  return p;
}

Result<std::vector<Window>> plan_windows(int64_t n, int64_t window, int64_t overlap) {
  if (n < 1) return invalid_argument("nothing to segment");
  if (window < 1 || overlap < 0 || overlap >= window)
    return invalid_argument("windows need 0 <= overlap < window");
  std::vector<Window> out;
  const int64_t step = window - overlap;
  for (int64_t s = 0;; s += step) {
    const int64_t e = std::min(n, s + window);
    out.push_back({s, e});
    if (e == n) break;
  }
  return out;
}

int64_t truncate_tokens(std::vector<int32_t>* t, int64_t keep, OverflowMode mode, int64_t keep_prefix) {
  const int64_t n = static_cast<int64_t>(t->size());
  if (n <= keep) return 0;
  keep = std::max(keep, keep_prefix + 1);
  const int64_t drop = n - keep;
  if (mode == OverflowMode::kTruncateMiddle) {
    const int64_t body = keep - keep_prefix;  // tokens kept after the prefix
    const int64_t head = body / 2;
    const auto first = t->begin() + keep_prefix + head;
    t->erase(first, first + drop);
  } else {
    const auto first = t->begin() + keep_prefix;
    t->erase(first, first + drop);
  }
  return drop;
}

std::vector<size_t> chat_drop_order(const std::vector<api::ChatMessage>& m, OverflowMode mode) {
  std::vector<size_t> cand;
  for (size_t i = 0; i + 1 < m.size(); ++i)
    if (m[i].role != "system" && m[i].role != "developer") cand.push_back(i);
  if (mode == OverflowMode::kTruncateMiddle && cand.size() > 1) {
    // Keep the first non-system turn for last; drop outward from the middle of the rest.
    std::vector<size_t> rest(cand.begin() + 1, cand.end());
    const double mid = (static_cast<double>(rest.size()) - 1) / 2;
    std::vector<std::pair<double, size_t>> by;
    for (size_t k = 0; k < rest.size(); ++k) by.push_back({std::abs(static_cast<double>(k) - mid), rest[k]});
    std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<size_t> out;
    for (const auto& [_, i] : by) out.push_back(i);
    out.push_back(cand.front());
    return out;
  }
  return cand;
}

size_t special_prefix_len(const PromptBuilder& prompts) {
  auto with = prompts.text_prompt(api::PromptInput{.text = "a"}, true, "prompt");
  auto without = prompts.text_prompt(api::PromptInput{.text = "a"}, false, "prompt");
  if (!with.ok() || !without.ok() || with->size() <= without->size()) return 0;
  return with->size() - without->size();
}

namespace {

PromptFrame frame(const std::string& p) {
  const size_t at = p.find("{text}");
  if (at == std::string::npos) return {p + "\n\n", ""};
  return {p.substr(0, at), p.substr(at + 6)};
}

}  // namespace

PromptFrame map_frame(const std::string& p) {
  return p.empty() ? PromptFrame{"Extract what in this part of the text answers the request.\n\nText: ", "\n\nExtract:"}
                   : frame(p);
}

PromptFrame reduce_frame(const std::string& p) {
  return p.empty() ? PromptFrame{"Combine these extracts into one answer.\n\n", "\n\nAnswer:"} : frame(p);
}

std::string progress_event(const SegmentUsage& s, int64_t num_segments) {
  json j = {{"object", "context_overflow.progress"}, {"segment", s.index},
            {"num_segments", num_segments},           {"window", {s.window.start, s.window.end}},
            {"prompt_tokens", s.prompt_tokens},       {"completion_tokens", s.completion_tokens},
            {"cached_tokens", s.cached_tokens},       {"finish_reason", s.finish_reason}};
  return "event: context_overflow.progress\ndata: " + j.dump() + "\n\n";
}

json segments_usage_json(const std::vector<SegmentUsage>& maps, const api::UsageInfo& reduce) {
  json segs = json::array();
  for (const auto& s : maps)
    segs.push_back({{"index", s.index}, {"window", {s.window.start, s.window.end}}, {"prompt_tokens", s.prompt_tokens},
                    {"completion_tokens", s.completion_tokens}, {"cached_tokens", s.cached_tokens}});
  json j = {{"segments", segs}};
  if (reduce.prompt_tokens > 0) j["reduce"] = {{"prompt_tokens", reduce.prompt_tokens}, {"completion_tokens", reduce.completion_tokens}};
  return j;
}

}  // namespace ts::server

// ---- OpenAIService members (declared in openai_service.h) ----

namespace ts::server {

namespace {

api::ApiError overflow_error(const std::string& message) {
  api::ApiError e;
  e.param = "context_overflow";
  e.code = "context_length_exceeded";
  e.message = message;
  return e;
}

std::vector<int32_t> concat(std::initializer_list<const std::vector<int32_t>*> parts) {
  std::vector<int32_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

}  // namespace

int64_t OpenAIService::truncate_chat(std::vector<api::ChatMessage>* messages, const api::ChatRequest& req,
                                     OverflowMode mode, int64_t max_tokens, std::vector<int32_t>* ids,
                                     int64_t* dropped_messages) {
  const int64_t ctx = backend_.max_model_len();
  const int64_t original = static_cast<int64_t>(ids->size());
  std::vector<size_t> order = chat_drop_order(*messages, mode);
  std::vector<bool> drop(messages->size(), false);
  *dropped_messages = 0;
  for (size_t i : order) {
    drop[i] = true;
    ++*dropped_messages;
    std::vector<api::ChatMessage> kept;
    for (size_t k = 0; k < messages->size(); ++k)
      if (!drop[k]) kept.push_back((*messages)[k]);
    auto r = prompts_.chat_prompt(kept, req.tools_json, req.add_generation_prompt);
    if (!r.ok()) continue;  // e.g. a template that needs alternating roles: drop one more
    if (static_cast<int64_t>(r->size()) + max_tokens <= ctx) {
      *messages = std::move(kept);
      *ids = std::move(r).value();
      return original - static_cast<int64_t>(ids->size());
    }
  }
  return -1;
}

void OpenAIService::segment_completion(const http::ExchangePtr& ex, const Call& call, JobSpec spec,
                                       const api::CompletionRequest& req, const OverflowPolicy& policy,
                                       std::vector<int32_t> ids) {
  const int64_t ctx = backend_.max_model_len();
  if (req.prompts.size() != 1 || req.echo)
    return respond_error(ex, overflow_error("segment mode takes one prompt and no echo"), call);
  const int32_t max_tokens = static_cast<int32_t>(req.sampling.max_tokens.value_or(16));
  const int32_t map_max = static_cast<int32_t>(policy.map_max_tokens.value_or(max_tokens));
  auto tok = [&](const std::string& text) -> std::vector<int32_t> {
    if (text.empty()) return {};
    auto r = prompts_.text_prompt(api::PromptInput{.text = text}, /*add_special=*/false, "context_overflow");
    return r.ok() ? std::move(r).value() : std::vector<int32_t>{};
  };
  // Leading special tokens (BOS) of the prompt stay in front of every window.
  const size_t num_pre = special_prefix_len(prompts_);
  std::vector<int32_t> pre(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(num_pre, ids.size())));
  std::vector<int32_t> content(ids.begin() + static_cast<std::ptrdiff_t>(pre.size()), ids.end());
  const PromptFrame mf = map_frame(policy.map_prompt), rf = reduce_frame(policy.reduce_prompt);
  const std::vector<int32_t> mp = tok(mf.prefix), ms = tok(mf.suffix), rp = tok(rf.prefix), rs = tok(rf.suffix);
  const int64_t map_need = static_cast<int64_t>(pre.size() + mp.size() + ms.size()) + policy.window + map_max;
  if (map_need > ctx)
    return respond_error(ex, overflow_error("a segment window of " + std::to_string(policy.window) + " tokens does not fit: with the map prompt (" +
                                            std::to_string(pre.size() + mp.size() + ms.size()) + " tokens) and " + std::to_string(map_max) +
                                            " map tokens it needs " + std::to_string(map_need) + " of the " + std::to_string(ctx) +
                                            "-token context; use a smaller window"), call);
  auto windows = plan_windows(static_cast<int64_t>(content.size()), policy.window, policy.overlap);
  if (!windows.ok()) return respond_error(ex, overflow_error(windows.status().message()), call);
  const int64_t joined_worst = static_cast<int64_t>(windows->size()) * (map_max + 2);
  const int64_t reduce_need = static_cast<int64_t>(pre.size() + rp.size() + rs.size()) + joined_worst + max_tokens;
  if (reduce_need > ctx)
    return respond_error(ex, overflow_error(std::to_string(windows->size()) + " windows of up to " + std::to_string(map_max) +
                                            " map tokens need " + std::to_string(reduce_need) + " tokens in the reduce step, more than the " +
                                            std::to_string(ctx) + "-token context; use larger windows, less overlap or a smaller map_max_tokens"), call);
  SegmentRun run;
  run.policy = policy;
  run.windows = *windows;
  api::SamplingOptions map_sampling = req.sampling;
  map_sampling.n = 1;
  for (size_t i = 0; i < windows->size(); ++i) {
    const Window& w = (*windows)[i];
    std::vector<int32_t> win(content.begin() + w.start, content.begin() + w.end);
    run.maps.push_back(api::to_engine_request(spec.meta.id + "-map" + std::to_string(i), concat({&pre, &mp, &win, &ms}),
                                              map_sampling, map_max, false, 0));
  }
  run.reduce_prompt_reserve = reduce_need - max_tokens;
  run.reduce_max_tokens = max_tokens;
  run.n = req.sampling.n;
  const std::string rid = spec.meta.id + "-reduce";
  const api::SamplingOptions sampling = req.sampling;
  const bool logprobs = req.logprobs.has_value();
  const int32_t top = req.logprobs.value_or(0);
  run.make_reduce = [pre, rp, rs, ctx, max_tokens, rid, sampling, logprobs, top, tok](const std::string& joined)
      -> api::ApiResult<engine::Request> {
    std::vector<int32_t> body = tok(joined);
    const int64_t room = ctx - max_tokens - static_cast<int64_t>(pre.size() + rp.size() + rs.size());
    truncate_tokens(&body, std::max<int64_t>(1, room), OverflowMode::kTruncateMiddle, 0);
    return api::to_engine_request(rid, concat({&pre, &rp, &body, &rs}), sampling, max_tokens, logprobs, top);
  };
  run_segmented(ex, call, std::move(spec), std::move(run), req.model, req.sampling.tier, {});
}

void OpenAIService::segment_chat(const http::ExchangePtr& ex, const Call& call, JobSpec spec, const api::ChatRequest& req,
                                 const OverflowPolicy& policy, PromptUse prompt) {
  const int64_t ctx = backend_.max_model_len();
  const api::ChatMessage& last = req.messages.back();
  if (last.role != "user" || !last.content || last.content->empty())
    return respond_error(ex, overflow_error("segment mode segments the last message, which must be a user message with text"), call);
  const int32_t max_tokens = static_cast<int32_t>(req.sampling.max_tokens.value_or(64));
  const int32_t map_max = static_cast<int32_t>(policy.map_max_tokens.value_or(max_tokens));
  auto input = prompts_.text_prompt(api::PromptInput{.text = *last.content}, false, "messages");
  if (!input.ok()) return respond_error(ex, input.error(), call);
  std::vector<api::ChatMessage> prefix(req.messages.begin(), req.messages.end() - 1);
  auto with_user = [prefix](const std::string& text) {
    std::vector<api::ChatMessage> m = prefix;
    m.push_back(api::ChatMessage{.role = "user", .content = text});
    return m;
  };
  const PromptFrame mf = map_frame(policy.map_prompt), rf = reduce_frame(policy.reduce_prompt);
  auto windows = plan_windows(static_cast<int64_t>(input->size()), policy.window, policy.overlap);
  if (!windows.ok()) return respond_error(ex, overflow_error(windows.status().message()), call);
  auto empty_reduce = prompts_.chat_prompt(with_user(rf.prefix + rf.suffix), req.tools_json, req.add_generation_prompt);
  if (!empty_reduce.ok()) return respond_error(ex, empty_reduce.error(), call);
  const int64_t reduce_need = static_cast<int64_t>(empty_reduce->size()) +
                              static_cast<int64_t>(windows->size()) * (map_max + 2) + max_tokens;
  if (reduce_need > ctx)
    return respond_error(ex, overflow_error(std::to_string(windows->size()) + " windows of up to " + std::to_string(map_max) +
                                            " map tokens need " + std::to_string(reduce_need) + " tokens in the reduce step, more than the " +
                                            std::to_string(ctx) + "-token context; use larger windows, less overlap or a smaller map_max_tokens"), call);
  SegmentRun run;
  run.policy = policy;
  run.windows = *windows;
  api::SamplingOptions map_sampling = req.sampling;
  map_sampling.n = 1;
  const tokenizer::Tokenizer& tk = prompts_.tokenizer();
  for (size_t i = 0; i < windows->size(); ++i) {
    const Window& w = (*windows)[i];
    std::vector<int32_t> win(input->begin() + w.start, input->begin() + w.end);
    auto ids = prompts_.chat_prompt(with_user(mf.prefix + tk.decode(win) + mf.suffix), req.tools_json, req.add_generation_prompt);
    if (!ids.ok()) return respond_error(ex, ids.error(), call);
    if (static_cast<int64_t>(ids->size()) + map_max > ctx)
      return respond_error(ex, overflow_error("segment window " + std::to_string(i) + " needs " + std::to_string(ids->size() + map_max) +
                                              " tokens with the map prompt and " + std::to_string(map_max) + " map tokens, more than the " +
                                              std::to_string(ctx) + "-token context; use a smaller window"), call);
    run.maps.push_back(api::to_engine_request(spec.meta.id + "-map" + std::to_string(i), std::move(ids).value(), map_sampling,
                                              map_max, false, 0));
  }
  run.reduce_prompt_reserve = reduce_need - max_tokens;
  run.reduce_max_tokens = max_tokens;
  run.n = req.sampling.n;
  const std::string rid = spec.meta.id + "-reduce";
  const std::string tools = req.tools_json;
  const bool agp = req.add_generation_prompt, logprobs = req.logprobs;
  const int32_t top = req.top_logprobs;
  const api::SamplingOptions sampling = req.sampling;
  run.make_reduce = [this, with_user, rf, tools, agp, ctx, max_tokens, rid, sampling, logprobs, top](const std::string& joined)
      -> api::ApiResult<engine::Request> {
    auto ids = prompts_.chat_prompt(with_user(rf.prefix + joined + rf.suffix), tools, agp);
    if (!ids.ok()) return ids.error();
    if (static_cast<int64_t>(ids->size()) + max_tokens > ctx)
      return overflow_error("the map outputs do not fit the reduce step (" + std::to_string(ids->size()) + " tokens)");
    return api::to_engine_request(rid, std::move(ids).value(), sampling, max_tokens, logprobs, top);
  };
  run_segmented(ex, call, std::move(spec), std::move(run), req.model, req.sampling.tier, prompt);
}

Result<OverflowPolicy> OpenAIService::overflow_policy(const http::ExchangePtr& ex, const std::string& body) {
  TS_ASSIGN_OR_RETURN(OverflowPolicy p, parse_context_overflow(body));
  if (p.from_request || !opts_.governor || !opts_.require_auth) return p;
  auto key = opts_.governor->keys()->authenticate(ex->request().header("authorization"));
  if (!key.ok()) return p;  // admission answers the bad key
  const std::string def = gateway::context_overflow_default(*opts_.governor->config(), key->tenant, key->app);
  if (def.empty()) return p;
  TS_ASSIGN_OR_RETURN(OverflowPolicy d, parse_context_overflow(json{{"context_overflow", def}}.dump()));
  d.from_request = false;
  return d;
}

void OpenAIService::join_overflow_threads(bool all) {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lk(overflow_mu_);
    for (auto it = overflow_threads_.begin(); it != overflow_threads_.end();) {
      if (all || it->second->load()) {
        done.push_back(std::move(it->first));
        it = overflow_threads_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : done)
    if (t.joinable()) t.join();
}

void OpenAIService::run_segmented(const http::ExchangePtr& ex, const Call& call, JobSpec spec, SegmentRun run,
                                  const std::string& model, engine::Tier tier, PromptUse prompt) {
  join_overflow_threads(false);
  int64_t prompt_tokens = run.reduce_prompt_reserve, max_tokens = int64_t{run.reduce_max_tokens} * std::max(1, run.n);
  for (const auto& r : run.maps) {
    prompt_tokens += static_cast<int64_t>(r.prompt_tokens.size());
    max_tokens += r.sampling.max_tokens;
  }
  http::HeaderList headers = {{"X-Request-Id", call.request_id}};
  std::shared_ptr<gateway::Admission> admission;
  if (gateway::Governor* gov = opts_.governor) {
    gateway::AdmitResult ar = gov->admit({.authorization = ex->request().header("authorization"), .model = model,
                                          .tier = tier, .prompt_tokens = prompt_tokens, .max_tokens = max_tokens});
    for (const auto& h : ar.headers) headers.push_back(h);
    if (!ar.ok()) {
      api::ApiError e = api::error_from_status(ar.status, "", ar.error_code);
      if (ar.error_code == "insufficient_quota") e.type = "insufficient_quota";
      return respond_error(ex, e, call, headers);
    }
    admission = std::make_shared<gateway::Admission>(std::move(*ar.admission));
    for (auto& r : run.maps) r.cache_namespace = admission->key.tenant;
  }
  spec.headers = headers;
  const std::string response_id = spec.meta.id;
  auto settle = [this, call, response_id, admission, tier, prompt](const JobResult& r) {
    record_finished(call, response_id, admission, tier, r, prompt);
  };
  auto handles = submit_all(std::move(run.maps));
  if (!handles.ok()) {
    JobResult r;
    r.error = true;
    r.finish = engine::FinishReason::kError;
    r.http_status = handles.error().http_status;
    settle(r);
    return respond_error(ex, handles.error(), call, headers);
  }
  if (spec.stream) ex->start_stream(200, "text/event-stream; charset=utf-8", headers);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::lock_guard<std::mutex> lk(overflow_mu_);
  overflow_threads_.emplace_back(std::thread([this, ex, spec = std::move(spec), run = std::move(run), hs = std::move(handles).value(),
                                              settle, done, admission]() mutable {
    // Map phase: collect each window's text and usage; progress events as windows finish.
    const size_t n = hs.size();
    std::vector<std::string> text(n);
    std::vector<SegmentUsage> seg(n);
    std::vector<bool> fin(n, false);
    size_t num_done = 0;
    Status error;
    bool cancelled = false;
    auto deadline = std::chrono::steady_clock::time_point::max();
    // Woken by every event pushed to a segment's handle; the timed wait only bounds how late a
    // client disconnect or server stop (which push nothing) is noticed.
    auto waker = std::make_shared<engine::detail::Waker>();
    for (auto& h : hs) h->set_listener(waker);
    while (num_done < n) {
      if ((ex->cancelled() || overflow_stop_.load()) && !cancelled) {
        cancelled = true;
        for (auto& h : hs) h->cancel();
        deadline = std::chrono::steady_clock::now() + ResponseJob::kCancelGrace;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      bool moved = false;
      for (size_t i = 0; i < n; ++i) {
        if (fin[i]) continue;
        while (auto ev = hs[i]->next(std::chrono::milliseconds(0))) {
          moved = true;
          text[i] += ev->text;
          if (ev->finish == engine::FinishReason::kError && error.ok())
            error = ev->error.ok() ? internal_error("segment generation failed") : ev->error;
          if (ev->finish != engine::FinishReason::kNone) seg[i].finish_reason = engine::finish_reason_name(ev->finish);
          if (ev->request_done) {
            fin[i] = true;
            ++num_done;
            seg[i].index = static_cast<int64_t>(i);
            seg[i].window = run.windows[i];
            seg[i].prompt_tokens = ev->usage.prompt_tokens;
            seg[i].completion_tokens = ev->usage.completion_tokens;
            seg[i].cached_tokens = ev->usage.cached_tokens;
            if (spec.stream && !cancelled) ex->write(progress_event(seg[i], static_cast<int64_t>(n)));
            break;
          }
        }
      }
      if (!moved && num_done < n) {
        std::unique_lock<std::mutex> wl(waker->mu);
        waker->cv.wait_for(wl, std::chrono::milliseconds(25), [&] { return waker->pending; });
        waker->pending = false;
      }
    }
    for (auto& h : hs) h->set_listener(nullptr);
    api::UsageInfo maps;
    for (const auto& s : seg) {
      maps.prompt_tokens += s.prompt_tokens;
      maps.completion_tokens += s.completion_tokens;
      maps.cached_tokens += s.cached_tokens;
    }
    auto end_early = [&](const api::ApiError* e) {
      JobResult r;
      r.usage = maps;
      r.cancelled = cancelled;
      r.error = e != nullptr;
      r.finish = e ? engine::FinishReason::kError : engine::FinishReason::kCancelled;
      r.http_status = spec.stream ? 200 : (e ? e->http_status : 499);
      settle(r);
      if (e && !ex->cancelled()) {
        if (spec.stream) {
          ex->write(api::sse_event(e->to_json()) + std::string(api::kSseDone));
          ex->finish();
        } else {
          http::Response resp;
          resp.status = e->http_status;
          resp.body = e->to_json();
          for (const auto& h : spec.headers) resp.set_header(h.first, h.second);
          ex->respond(std::move(resp));
        }
      }
      done->store(true);
    };
    if (cancelled) return end_early(nullptr);
    if (!error.ok()) {
      api::ApiError e = api::error_from_status(error);
      return end_early(&e);
    }
    std::string joined;
    for (size_t i = 0; i < n; ++i) joined += (i ? "\n\n" : "") + text[i];
    auto reduce = run.make_reduce(joined);
    if (!reduce.ok()) return end_early(&reduce.error());
    if (admission) reduce->cache_namespace = admission->key.tenant;
    auto h = backend_.submit(std::move(reduce).value());
    if (!h.ok()) {
      api::ApiError e = api::error_from_status(h.status());
      return end_early(&e);
    }
    spec.extra_usage = maps;
    spec.usage_extension = segments_usage_json(seg, {}).dump();
    spec.body_extension = json{{"context_overflow", {{"mode", "segment"}, {"segments", n}, {"window", run.policy.window},
                                                     {"overlap", run.policy.overlap}}}}.dump();
    start_job(std::move(spec), ex, {std::move(h).value()}, settle);
    done->store(true);
  }), done);
}

}  // namespace ts::server
