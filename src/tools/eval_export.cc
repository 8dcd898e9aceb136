#include "tools/eval_export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

namespace ts::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_failed_request(const LedgerRequest& r) { return r.http_status >= 400 || r.finish_reason == "error"; }
bool is_flagged_request(const LedgerRequest& r) {
  return is_failed_request(r) || r.finish_reason == "length" || !r.judgement.empty();
}

namespace {

json metadata(const LedgerRequest& r) {
  json j = {{"request_id", r.request_id}, {"time", r.time}, {"tenant", r.tenant}, {"app", r.app},
            {"model", r.model}, {"http_status", r.http_status}, {"finish_reason", r.finish_reason},
            {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens}};
  if (!r.prompt_id.empty()) j["prompt"] = {{"id", r.prompt_id}, {"version", r.prompt_version}};
  if (!r.judgement.empty()) j["judgement"] = r.judgement;
  return j;
}

// A runnable eval case from a logged body, or the reason there is none (*why).
std::optional<json> case_from_body(const LedgerRequest& r, std::string* why) {
  if (r.request_body.empty()) {
    *why = "no body logged (the tenant did not opt into log_bodies)";
    return std::nullopt;
  }
  json body = json::parse(r.request_body, nullptr, false);
  if (!body.is_object()) {
    *why = "logged body is not a JSON object";
    return std::nullopt;
  }
  json c = {{"id", r.request_id}};
  if (body.contains("messages")) {
    const json& m = body["messages"];
    bool ok = m.is_array() && !m.empty();
    if (ok)
      for (const json& x : m)
        ok = ok && x.is_object() && x.contains("role") && x["role"].is_string() && x.contains("content") &&
             x["content"].is_string();
    if (!ok) {
      *why = "messages are not all {role, content: string} (eval cannot express them)";
      return std::nullopt;
    }
    json msgs = json::array();
    for (const json& x : m) msgs.push_back({{"role", x["role"]}, {"content", x["content"]}});
    c["messages"] = std::move(msgs);
  } else if (body.contains("prompt") && body["prompt"].is_string()) {
    c["prompt"] = body["prompt"];
  } else {
    *why = "body has neither messages nor a string prompt";
    return std::nullopt;
  }
  // Sampling as the request had it, where the eval format holds it.
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (body.contains(k) && body[k].is_number_integer() && body[k].get<int64_t>() >= 1 &&
        body[k].get<int64_t>() <= (int64_t{1} << 20) && !c.contains("max_tokens"))
      c["max_tokens"] = body[k];
  if (body.contains("temperature") && body["temperature"].is_number() && body["temperature"].get<double>() >= 0 &&
      body["temperature"].get<double>() <= 2)
    c["temperature"] = body["temperature"];
  if (body.contains("stop")) {
    const json& s = body["stop"];
    bool ok = s.is_string();
    if (s.is_array()) {
      ok = true;
      for (const json& x : s) ok = ok && x.is_string();
    }
    if (ok) c["stop"] = s;
  }
  // The scorer: the floor the request failed to reach (see the header).
  const json* rf = body.contains("response_format") && body["response_format"].is_object()
                       ? &body["response_format"] : nullptr;
  const std::string rf_type = rf && rf->contains("type") && (*rf)["type"].is_string()
                                  ? (*rf)["type"].get<std::string>() : "";
  if (rf_type == "json_schema" && rf->contains("json_schema") && (*rf)["json_schema"].is_object() &&
      (*rf)["json_schema"].contains("schema") && (*rf)["json_schema"]["schema"].is_object()) {
    c["scorer"] = "json_schema";
    c["expected"] = (*rf)["json_schema"]["schema"];
  } else if (rf_type == "json_object") {
    c["scorer"] = "json_schema";
    c["expected"] = {{"type", "object"}};
  } else {
    c["scorer"] = "regex";
    c["expected"] = "\\S";
  }
  json meta = metadata(r);
  meta["recorded_output"] = r.output_text;
  c["ledger"] = std::move(meta);
  return c;
}

}  // namespace

Result<SuiteExport> export_failed_requests(const std::vector<LedgerRequest>& requests, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec)) return invalid_argument("cannot create suite folder " + dir);
  const fs::path layer = fs::path(dir) / "ledger-failures";
  if (fs::exists(layer, ec)) return invalid_argument(layer.string() + " already exists; export into a new folder");
  const fs::path tmp = fs::path(dir) / (".ledger-failures.tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec)) return invalid_argument("cannot create " + tmp.string());
  auto fail = [&](const std::string& why) {
    std::error_code e2;
    fs::remove_all(tmp, e2);
    return invalid_argument(why);
  };
  std::string cases, pending;
  SuiteExport out;
  for (const auto& r : requests) {
    if (!is_flagged_request(r)) continue;
    std::string why;
    if (auto c = case_from_body(r, &why)) {
      cases += c->dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      ++out.cases;
    } else {
      json j = metadata(r);
      j["reason"] = why;
      pending += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      ++out.metadata_only;
    }
  }
  auto write = [&](const char* name, const std::string& text) -> bool {
    std::ofstream f(tmp / name, std::ios::binary);
    f << text;
    f.close();
    return bool(f);
  };
  if (out.cases > 0 && !write("cases.jsonl", cases)) return fail("cannot write " + (tmp / "cases.jsonl").string());
  if (out.metadata_only > 0 && !write("PENDING.ndjson", pending))
    return fail("cannot write " + (tmp / "PENDING.ndjson").string());
  const std::string readme =
      "# ledger-failures\n\n" + std::to_string(out.cases + out.metadata_only) +
      " requests exported from the usage ledger: failed (HTTP status >= 400 or finish_reason \"error\"), "
      "flagged (finish_reason \"length\") or judged (e.g. a route judged wrong: see \"judgement\").\n\n"
      "- cases.jsonl: " + std::to_string(out.cases) +
      " runnable cases, rebuilt from bodies logged for tenants that opted into `log_bodies`. The ledger does "
      "not know the right answer: each case's scorer is a floor (json_schema from the request's "
      "response_format, else regex \"\\\\S\": a non-empty answer). Tighten `expected` by hand; the output "
      "the request got is under ledger.recorded_output.\n"
      "- PENDING.ndjson: " + std::to_string(out.metadata_only) +
      " requests with metadata only (no body logged, or one eval cannot express; see each line's "
      "\"reason\"). To turn one into a case, write a line to a .jsonl file in this folder:\n\n"
      "    {\"id\": \"<request_id>\", \"prompt\" | \"messages\": ..., \"scorer\": ..., \"expected\": ...}\n";
  if (!write("README.md", readme)) return fail("cannot write README.md");
  fs::rename(tmp, layer, ec);
  if (ec) return fail("cannot move the layer into " + layer.string() + ": " + ec.message());
  return out;
}

}  // namespace ts::tools
