// Running a suite against a server, summarizing, comparing with a baseline, RUN.json.
#include "tools/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "core/log.h"
#include "tools/eval_scorers.h"
#include "net/http_client.h"

namespace ts::tools {

using json = nlohmann::json;
using namespace net;  // the shared HTTP client (src/net)
using SteadyClock = std::chrono::steady_clock;

namespace {

Result<Url> server_url(const std::string& text) {
  TS_ASSIGN_OR_RETURN(Url url, parse_url(text));
  if (url.base_path.size() >= 3 && url.base_path.compare(url.base_path.size() - 3, 3, "/v1") == 0)
    url.base_path.resize(url.base_path.size() - 3);
  return url;
}

HttpRequest make_request(const EvalOptions& o, const std::string& method, const std::string& path) {
  HttpRequest req;
  req.method = method;
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}};
  if (!o.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + o.api_key);
  return req;
}

Result<std::string> discover_model(const Url& url, const EvalOptions& o) {
  HttpRequest req = make_request(o, "GET", "/v1/models");
  HttpCallOptions call;
  call.deadline = SteadyClock::now() + std::chrono::seconds(30);
  auto res = http_fetch(url, req, call);
  if (!res.ok()) return unavailable("GET /v1/models failed: " + res.status().message());
  json j = json::parse(res->body, nullptr, false);
  if (res->head.status != 200 || j.is_discarded() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    return unavailable("GET /v1/models answered " + std::to_string(res->head.status) +
                       " without a model id; pass --model");
  return j["data"][0]["id"].get<std::string>();
}

std::string error_message(int status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::string msg;
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string())
    msg = j["error"]["message"].get<std::string>();
  else
    msg = body.substr(0, 200);
  return "HTTP " + std::to_string(status) + (msg.empty() ? "" : ": " + msg);
}

CaseResult run_case(const Url& url, const EvalOptions& o, const std::string& model,
                    const EvalCase& c) {
  CaseResult r;
  r.id = c.id;
  r.layer = c.layer;
  json body = {{"model", model}, {"max_tokens", c.max_tokens}, {"temperature", c.temperature}};
  if (!c.stop.is_null()) body["stop"] = c.stop;
  std::string path;
  if (c.chat) {
    path = "/v1/chat/completions";
    json msgs = json::array();
    for (const auto& m : c.messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
    body["messages"] = std::move(msgs);
  } else {
    path = "/v1/completions";
    body["prompt"] = c.prompt;
  }
  HttpRequest req = make_request(o, "POST", path);
  req.body = body.dump();
  HttpCallOptions call;
  const auto t0 = SteadyClock::now();
  call.deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1000));
  call.cancel = o.stop;
  auto res = http_fetch(url, req, call);
  r.latency_ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
  if (!res.ok()) {
    r.error = res.status().message();
  } else if (res->head.status != 200) {
    r.error = error_message(res->head.status, res->body);
  } else {
    json j = json::parse(res->body, nullptr, false);
    const json* choice = nullptr;
    if (!j.is_discarded() && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty())
      choice = &j["choices"][0];
    if (!choice) {
      r.error = "response has no choices";
    } else {
      if (c.chat && choice->contains("message") && (*choice)["message"].contains("content") &&
          (*choice)["message"]["content"].is_string())
        r.output = (*choice)["message"]["content"].get<std::string>();
      else if (!c.chat && choice->contains("text") && (*choice)["text"].is_string())
        r.output = (*choice)["text"].get<std::string>();
      else
        r.error = "response choice has no text";
      if (choice->contains("finish_reason") && (*choice)["finish_reason"].is_string())
        r.finish_reason = (*choice)["finish_reason"].get<std::string>();
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
        r.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
      }
    }
  }
  if (r.error.empty()) {
    ScoreResult s = score_output(c, r.output);
    r.score = s.score;
    r.reason = s.reason;
  } else {
    r.score = 0;
    r.reason = "request failed";
  }
  r.repetition = repetition_rate(r.output, o.repetition_n);
  return r;
}

LayerSummary summarize_cases(const std::vector<const CaseResult*>& cs) {
  LayerSummary s;
  s.n = static_cast<int64_t>(cs.size());
  std::vector<double> scores, toks, chars;
  bool binary = true;
  int64_t passed = 0;
  for (const CaseResult* c : cs) {
    scores.push_back(c->score);
    binary = binary && (c->score == 0 || c->score == 1);
    passed += c->score == 1;
    s.score += c->score;
    s.errors += !c->error.empty();
    s.repetition += c->repetition;
    toks.push_back(static_cast<double>(c->completion_tokens));
    chars.push_back(static_cast<double>(c->output.size()));
  }
  if (s.n > 0) {
    s.score /= static_cast<double>(s.n);
    s.repetition /= static_cast<double>(s.n);
  }
  s.ci = binary ? wilson_interval(passed, s.n) : bootstrap_mean_ci(scores);
  s.output_tokens = summarize(toks);
  s.output_chars = summarize(chars);
  return s;
}

json summary_json(const Summary& s) {
  return {{"mean", s.mean}, {"min", s.min}, {"p50", s.p50}, {"p95", s.p95}, {"max", s.max}};
}

json layer_json(const LayerSummary& l) {
  return {{"n", l.n},
          {"score", l.score},
          {"ci", {l.ci.low, l.ci.high}},
          {"errors", l.errors},
          {"output_tokens", summary_json(l.output_tokens)},
          {"output_chars", summary_json(l.output_chars)},
          {"repetition", l.repetition}};
}

}  // namespace

std::map<std::string, LayerSummary> summarize_layers(const std::vector<CaseResult>& cases,
                                                     LayerSummary* overall) {
  std::map<std::string, std::vector<const CaseResult*>> by;
  std::vector<const CaseResult*> all;
  for (const auto& c : cases) {
    by[c.layer].push_back(&c);
    all.push_back(&c);
  }
  std::map<std::string, LayerSummary> out;
  for (const auto& [name, cs] : by) out[name] = summarize_cases(cs);
  if (overall) *overall = summarize_cases(all);
  return out;
}

Result<EvalRun> run_eval(const EvalSuite& suite, const EvalOptions& o) {
  TS_ASSIGN_OR_RETURN(Url url, server_url(o.url));
  EvalRun run;
  run.url = o.url;
  run.suite = suite.dir;
  run.created = log::utc_timestamp();
  if (o.model.empty()) {
    TS_ASSIGN_OR_RETURN(run.model, discover_model(url, o));
  } else {
    run.model = o.model;
  }
  std::vector<const EvalCase*> todo;
  for (const auto& l : suite.layers)
    for (const auto& c : l.cases) todo.push_back(&c);
  run.cases.resize(todo.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      if (o.stop && o.stop->load()) {
        run.cases[i] = CaseResult{.id = todo[i]->id, .layer = todo[i]->layer, .reason = "request failed",
                                  .error = "not sent (interrupted)"};
        continue;
      }
      run.cases[i] = run_case(url, o, run.model, *todo[i]);
      int64_t d = ++done;
      if (o.progress) {
        std::lock_guard<std::mutex> lk(progress_mu);
        std::fprintf(o.progress, "\r[%lld/%zu] %s/%s %s", static_cast<long long>(d), todo.size(),
                     todo[i]->layer.c_str(), todo[i]->id.c_str(),
                     run.cases[i].score > 0 ? "pass" : "fail");
        std::fflush(o.progress);
      }
    }
  };
  std::vector<std::thread> threads;
  const int32_t n = std::max<int32_t>(1, std::min<int32_t>(o.concurrency, static_cast<int32_t>(todo.size())));
  for (int32_t t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (o.progress) std::fprintf(o.progress, "\n");
  run.layers = summarize_layers(run.cases, &run.overall);
  return run;
}

Comparison compare_runs(const EvalRun& base, const EvalRun& cand, const CompareOptions& o) {
  Comparison cmp;
  std::map<std::string, std::map<std::string, const CaseResult*>> base_by;
  for (const auto& c : base.cases) base_by[c.layer][c.id] = &c;
  std::map<std::string, std::vector<const CaseResult*>> cand_by;
  for (const auto& c : cand.cases) cand_by[c.layer].push_back(&c);
  std::vector<std::string> names;
  for (const auto& [n, _] : base_by) names.push_back(n);
  for (const auto& [n, _] : cand_by)
    if (!base_by.count(n)) names.push_back(n);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    LayerComparison lc;
    lc.layer = name;
    lc.in_baseline = base_by.count(name) > 0;
    lc.in_candidate = cand_by.count(name) > 0;
    if (!lc.in_baseline || !lc.in_candidate) {
      lc.verdict = lc.in_baseline ? "removed" : "new";
      cmp.layers.push_back(std::move(lc));
      continue;
    }
    std::vector<double> b, c, bt, ct, br, cr;
    for (const CaseResult* cc : cand_by[name]) {
      auto it = base_by[name].find(cc->id);
      if (it == base_by[name].end()) continue;
      b.push_back(it->second->score);
      c.push_back(cc->score);
      bt.push_back(static_cast<double>(it->second->completion_tokens));
      ct.push_back(static_cast<double>(cc->completion_tokens));
      br.push_back(it->second->repetition);
      cr.push_back(cc->repetition);
    }
    lc.test = paired_test(b, c);
    lc.base_score = lc.test.base_mean;
    lc.score = lc.test.cand_mean;
    lc.delta = lc.test.delta;
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return v.empty() ? 0.0 : s / static_cast<double>(v.size());
    };
    lc.base_mean_tokens = mean(bt);
    lc.mean_tokens = mean(ct);
    lc.base_repetition = mean(br);
    lc.repetition = mean(cr);
    const bool significant = lc.test.n > 0 && lc.test.p_value < o.alpha;
    if (lc.delta < -o.regression_threshold && significant) lc.verdict = "regression";
    else if (lc.delta > o.regression_threshold && significant) lc.verdict = "improvement";
    else lc.verdict = "no_change";
    if (lc.delta > 0) {
      const bool len_jump = lc.base_mean_tokens > 0
                                ? lc.mean_tokens > lc.base_mean_tokens * (1 + o.length_jump)
                                : lc.mean_tokens > 0;
      if (len_jump) lc.flags.push_back("score_up_length_jump");
      if (lc.repetition - lc.base_repetition > o.repetition_jump)
        lc.flags.push_back("score_up_repetition_jump");
    }
    if (lc.verdict == "regression") cmp.regressed.push_back(name);
    if (!lc.flags.empty()) cmp.flagged.push_back(name);
    cmp.layers.push_back(std::move(lc));
  }
  return cmp;
}

std::string run_json(const EvalRun& run, const Comparison* cmp) {
  json j;
  j["version"] = 1;
  j["created"] = run.created;
  j["url"] = run.url;
  j["model"] = run.model;
  j["suite"] = run.suite;
  j["overall"] = layer_json(run.overall);
  j["layers"] = json::object();
  for (const auto& [name, l] : run.layers) j["layers"][name] = layer_json(l);
  j["cases"] = json::array();
  for (const auto& c : run.cases) {
    json cj = {{"id", c.id},
               {"layer", c.layer},
               {"score", c.score},
               {"output", c.output},
               {"prompt_tokens", c.prompt_tokens},
               {"completion_tokens", c.completion_tokens},
               {"finish_reason", c.finish_reason},
               {"latency_ms", std::round(c.latency_ms * 10) / 10},
               {"repetition", c.repetition}};
    if (!c.reason.empty()) cj["reason"] = c.reason;
    if (!c.error.empty()) cj["error"] = c.error;
    j["cases"].push_back(std::move(cj));
  }
  if (cmp) {
    json cj;
    cj["baseline"] = cmp->baseline_path;
    cj["layers"] = json::object();
    for (const auto& l : cmp->layers) {
      cj["layers"][l.layer] = {{"verdict", l.verdict},
                               {"baseline_score", l.base_score},
                               {"score", l.score},
                               {"delta", l.delta},
                               {"test", l.test.test},
                               {"n_paired", l.test.n},
                               {"p_value", l.test.p_value},
                               {"regressed_cases", l.test.base_only},
                               {"fixed_cases", l.test.cand_only},
                               {"baseline_mean_tokens", l.base_mean_tokens},
                               {"mean_tokens", l.mean_tokens},
                               {"baseline_repetition", l.base_repetition},
                               {"repetition", l.repetition},
                               {"flags", l.flags}};
    }
    cj["regressed"] = cmp->regressed;
    cj["flagged"] = cmp->flagged;
    j["comparison"] = std::move(cj);
  }
  return j.dump(2) + "\n";
}

Result<EvalRun> parse_run_json(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("not a JSON object");
  if (!j.contains("cases") || !j["cases"].is_array())
    return invalid_argument("no \"cases\" array (is this a RUN.json written by tokenserve eval?)");
  EvalRun run;
  run.url = j.value("url", "");
  run.model = j.value("model", "");
  run.suite = j.value("suite", "");
  run.created = j.value("created", "");
  for (size_t i = 0; i < j["cases"].size(); ++i) {
    const json& c = j["cases"][i];
    const std::string where = "cases[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("layer") ||
        !c["layer"].is_string() || !c.contains("score") || !c["score"].is_number())
      return invalid_argument(where + ": needs string \"id\", string \"layer\" and number \"score\"");
    CaseResult r;
    r.id = c["id"].get<std::string>();
    r.layer = c["layer"].get<std::string>();
    r.score = c["score"].get<double>();
    if (r.score < 0 || r.score > 1) return invalid_argument(where + ": score outside [0, 1]");
    // Optional fields: a wrong type is an error, never an exception.
    auto str = [&](const char* k, std::string* out) {
      if (!c.contains(k) || c[k].is_null()) return true;
      if (!c[k].is_string()) return false;
      *out = c[k].get<std::string>();
      return true;
    };
    auto num = [&](const char* k, auto* out) {
      if (!c.contains(k) || c[k].is_null()) return true;
      if (!c[k].is_number()) return false;
      *out = c[k].get<std::remove_pointer_t<decltype(out)>>();
      return true;
    };
    if (!str("output", &r.output) || !str("finish_reason", &r.finish_reason) || !str("reason", &r.reason) ||
        !str("error", &r.error) || !num("completion_tokens", &r.completion_tokens) ||
        !num("prompt_tokens", &r.prompt_tokens) || !num("repetition", &r.repetition))
      return invalid_argument(where + ": a field has the wrong type");
    run.cases.push_back(std::move(r));
  }
  run.layers = summarize_layers(run.cases, &run.overall);
  return run;
}

std::string format_eval_summary(const EvalRun& run, const Comparison* cmp) {
  std::ostringstream o;
  char buf[512];
  o << "model " << run.model << " at " << run.url << ", " << run.cases.size() << " cases\n";
  std::snprintf(buf, sizeof buf, "%-20s %5s %7s %17s %6s %9s %6s\n", "layer", "n", "score",
                "95% CI", "errors", "tok p50", "rep");
  o << buf;
  auto row = [&](const std::string& name, const LayerSummary& l) {
    std::snprintf(buf, sizeof buf, "%-20s %5lld %7.3f   [%5.3f, %5.3f] %6lld %9.0f %6.3f\n",
                  name.c_str(), static_cast<long long>(l.n), l.score, l.ci.low, l.ci.high,
                  static_cast<long long>(l.errors), l.output_tokens.p50, l.repetition);
    o << buf;
  };
  for (const auto& [name, l] : run.layers) row(name, l);
  row("(all)", run.overall);
  if (cmp) {
    o << "\nagainst baseline " << cmp->baseline_path << ":\n";
    for (const auto& l : cmp->layers) {
      if (l.verdict == "new" || l.verdict == "removed") {
        o << "  " << l.layer << ": " << l.verdict << " layer\n";
        continue;
      }
      std::snprintf(buf, sizeof buf, "  %-20s %.3f -> %.3f (%+.3f, %s p=%.4f, %lld pairs) %s",
                    l.layer.c_str(), l.base_score, l.score, l.delta, l.test.test.c_str(),
                    l.test.p_value, static_cast<long long>(l.test.n), l.verdict.c_str());
      o << buf;
      for (const auto& f : l.flags) o << " [FLAG " << f << "]";
      o << "\n";
    }
    if (!cmp->regressed.empty()) {
      o << "REGRESSION in:";
      for (const auto& r : cmp->regressed) o << " " << r;
      o << "\n";
    }
  }
  return o.str();
}

Status write_eval_outputs(const std::string& path, const EvalRun& run, const Comparison* cmp) {
  std::string stem = path;
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0) stem.resize(stem.size() - 5);
  const std::string stem_name = std::filesystem::path(stem).filename().string();
  const std::vector<std::pair<std::string, std::string>> files = {
      {path, run_json(run, cmp)},
      {stem + ".md", eval_markdown(run, cmp, stem_name)},
      {stem + ".scores.svg", eval_scores_svg(run, cmp)},
      {stem + ".lengths.svg", eval_lengths_svg(run)},
  };
  std::vector<std::string> tmps;
  auto cleanup = [&] {
    std::error_code ec;
    for (const auto& t : tmps) std::filesystem::remove(t, ec);
  };
  for (const auto& [p, text] : files) {
    const std::string tmp = p + ".tmp";
    std::ofstream f(tmp, std::ios::binary);
    tmps.push_back(tmp);
    f << text;
    f.close();
    if (!f) {
      cleanup();
      return invalid_argument("cannot write " + p);
    }
  }
  for (size_t i = 0; i < files.size(); ++i) {
    std::error_code ec;
    std::filesystem::rename(tmps[i], files[i].first, ec);
    if (ec) {
      cleanup();
      return invalid_argument("cannot write " + files[i].first + ": " + ec.message());
    }
  }
  return ok_status();
}

}  // namespace ts::tools
