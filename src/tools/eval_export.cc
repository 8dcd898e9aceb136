#include "tools/eval_export.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace ts::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

bool is_failed_request(const LedgerRequest& r) { return r.http_status >= 400 || r.finish_reason == "error"; }

Result<int64_t> export_failed_requests(const std::vector<LedgerRequest>& requests, const std::string& dir) {
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
  int64_t n = 0;
  {
    std::ofstream f(tmp / "PENDING.ndjson", std::ios::binary);
    for (const auto& r : requests) {
      if (!is_failed_request(r)) continue;
      json j = {{"request_id", r.request_id}, {"time", r.time}, {"tenant", r.tenant}, {"app", r.app},
                {"model", r.model}, {"http_status", r.http_status}, {"finish_reason", r.finish_reason},
                {"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.completion_tokens}};
      if (!r.prompt_id.empty()) j["prompt"] = {{"id", r.prompt_id}, {"version", r.prompt_version}};
      f << j.dump() << "\n";
      ++n;
    }
    f.close();
    if (!f) return fail("cannot write " + (tmp / "PENDING.ndjson").string());
  }
  {
    std::ofstream f(tmp / "README.md", std::ios::binary);
    f << "# ledger-failures\n\n"
      << n << " failed requests exported from the usage ledger (HTTP status >= 400 or finish_reason "
      << "\"error\").\n\n"
      << "The ledger records no request or response bodies (body logging is not available to any "
      << "tenant yet), so these are not runnable cases: PENDING.ndjson holds each request's metadata "
      << "(request id, tenant, app, model, status, token counts, and the registry prompt id + version "
      << "when one was used). To turn one into a case, write a line to a .jsonl file in this folder:\n\n"
      << "    {\"id\": \"<request_id>\", \"prompt\" | \"messages\": ..., \"scorer\": ..., \"expected\": ...}\n";
    f.close();
    if (!f) return fail("cannot write README.md");
  }
  fs::rename(tmp, layer, ec);
  if (ec) return fail("cannot move the layer into " + layer.string() + ": " + ec.message());
  return n;
}

}  // namespace ts::tools
