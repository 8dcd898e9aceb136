#include "server/scripted_backend.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ts::server {

using json = nlohmann::json;

Result<std::vector<ScriptedReply>> ScriptedBackend::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("cannot read the scripted replies file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array())
    return invalid_argument("scripted replies file '" + path + "' is not a JSON array");
  std::vector<ScriptedReply> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    std::string where = "scripted reply " + std::to_string(i);
    if (!e.is_object() || !e.contains("reply") || !e["reply"].is_string())
      return invalid_argument(where + ": expected {\"reply\": string, \"expect_in_prompt\": [string]}");
    ScriptedReply r;
    r.reply = e["reply"].get<std::string>();
    if (e.contains("expect_in_prompt")) {
      if (!e["expect_in_prompt"].is_array()) return invalid_argument(where + ": expect_in_prompt must be an array");
      for (const json& s : e["expect_in_prompt"]) {
        if (!s.is_string()) return invalid_argument(where + ": expect_in_prompt must hold strings");
        r.expect_in_prompt.push_back(s.get<std::string>());
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

ScriptedBackend::ScriptedBackend(const tokenizer::Tokenizer& tok, std::vector<ScriptedReply> script,
                                 int32_t max_model_len)
    : tok_(tok), script_(std::move(script)), max_model_len_(max_model_len) {}

Result<std::shared_ptr<engine::RequestHandle>> ScriptedBackend::submit(engine::Request req) {
  if (stopped_) return unavailable("the server is draining");
  std::optional<ScriptedReply> reply;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (next_ < script_.size()) reply = script_[next_++];
  }
  auto state = std::make_shared<engine::detail::HandleState>();
  auto handle = std::make_shared<engine::RequestHandle>(req.id, req.sampling.n, state);
  const auto now = engine::Clock::now();
  engine::Usage usage{.prompt_tokens = static_cast<int64_t>(req.prompt_tokens.size()), .completion_tokens = 0,
                      .cached_tokens = 0};
  engine::Timings timings{.arrival = now, .scheduled = now, .first_token = now, .finished = now, .num_preemptions = 0};
  std::deque<engine::Event> events;
  Status problem;
  if (!reply) {
    problem = Status(StatusCode::kInternal, "scripted backend: no scripted reply left for request " + req.id);
  } else {
    std::string prompt = tok_.decode(req.prompt_tokens);
    for (const std::string& want : reply->expect_in_prompt)
      if (prompt.find(want) == std::string::npos)
        problem = Status(StatusCode::kInternal, "scripted backend: the prompt of request " + req.id +
                                                    " does not contain the expected text '" + want + "'");
  }
  int32_t n = std::max<int32_t>(1, req.sampling.n);
  if (!problem.ok()) {
    for (int32_t c = 0; c < n; ++c) {
      engine::Event ev{.index = c, .finish = engine::FinishReason::kError, .error = problem};
      ev.request_done = c == n - 1;
      ev.usage = usage;
      ev.timings = timings;
      events.push_back(std::move(ev));
    }
  } else {
    std::vector<int32_t> ids = tok_.encode(reply->reply, /*add_special=*/false, /*parse_special=*/true);
    for (int32_t c = 0; c < n; ++c) {
      tokenizer::StreamDecoder dec(tok_);
      int32_t produced = 0;
      for (size_t i = 0; i < ids.size() && produced < req.sampling.max_tokens; ++i, ++produced) {
        engine::Event ev{.index = c, .text = tok_.is_control(ids[i]) ? std::string() : dec.push(ids[i]),
                         .token_ids = {ids[i]}};
        ++usage.completion_tokens;
        events.push_back(std::move(ev));
      }
      bool cut = produced < static_cast<int32_t>(ids.size());
      engine::Event last{.index = c, .text = dec.finish(),
                         .finish = cut ? engine::FinishReason::kLength : engine::FinishReason::kStop};
      if (!cut) ++usage.completion_tokens;  // the end-of-generation token a model samples
      last.request_done = c == n - 1;
      events.push_back(std::move(last));
    }
    for (auto& ev : events) {
      ev.usage = usage;
      ev.timings = timings;
    }
  }
  for (auto& ev : events) state->push(std::move(ev));
  return handle;
}

}  // namespace ts::server
