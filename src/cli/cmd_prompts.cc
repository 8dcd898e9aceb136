// tokenserve prompts create|list|get|label|render: the prompt registry in the ledger database
// (gateway/prompt_registry.h), the same operations as /v1/prompts (server/prompt_routes.h).
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "gateway/admin.h"
#include "gateway/prompt_registry.h"
#include "server/prompt_routes.h"

namespace ts::cli {

namespace {

using json = nlohmann::json;

bool read_text(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return !f.bad();
}

void print_version(const gateway::PromptVersion& v) {
  json j = {{"id", v.id}, {"version", v.version}, {"hash", v.hash}, {"tenant", v.tenant},
            {"kind", v.kind}, {"variables", v.variables}, {"labels", v.labels},
            {"created", gateway::format_rfc3339(v.created)}};
  if (v.kind == "messages") j["messages"] = json::parse(v.content, nullptr, false);
  else j["template"] = v.content;
  std::cout << j.dump(2) << "\n";
}

}  // namespace

int cmd_prompts(int argc, char** argv) {
  CLI::App app("Versioned prompts in the ledger database (the same registry as /v1/prompts)", "prompts");
  app.require_subcommand(1);
  app.fallthrough();
  std::string ledger = gateway::kDefaultLedger;
  app.add_option("--ledger", ledger, "ledger database: SQLite file or postgresql:// URL")->capture_default_str();

  std::string id, messages_file, template_file, template_text, tenant, label, vars = "{}";
  std::vector<std::string> labels;
  int64_t version = 0;
  bool as_json = false;
  CLI::App* c = app.add_subcommand("create", "add the next version of a prompt");
  c->add_option("--id", id, "prompt id")->required();
  auto* mf = c->add_option("--messages-file", messages_file, "JSON file: [{\"role\",\"content\"}...] (Jinja contents)");
  auto* tf = c->add_option("--template-file", template_file, "file with one Jinja template (sent as a user message)");
  auto* tt = c->add_option("--template", template_text, "one Jinja template given inline");
  mf->excludes(tf)->excludes(tt);
  tf->excludes(tt);
  c->add_option("--label", labels, "label to point at the new version (repeatable)");
  c->add_option("--tenant", tenant, "owning tenant (default: shared by all tenants)");

  CLI::App* l = app.add_subcommand("list", "list prompts with their latest version and labels");
  l->add_option("--tenant", tenant, "only prompts this tenant can read");
  l->add_flag("--json", as_json, "JSON output");

  CLI::App* g = app.add_subcommand("get", "show one version (default the latest)");
  g->add_option("id", id, "prompt id")->required();
  auto* gv = g->add_option("--version", version, "version number")->check(CLI::PositiveNumber);
  g->add_option("--label", label, "label (e.g. production)")->excludes(gv);

  CLI::App* lb = app.add_subcommand("label", "point a label at a version");
  lb->add_option("id", id, "prompt id")->required();
  lb->add_option("label", label, "label")->required();
  lb->add_option("version", version, "version")->required()->check(CLI::PositiveNumber);

  CLI::App* r = app.add_subcommand("render", "render a version with variables, as the server does");
  r->add_option("id", id, "prompt id")->required();
  auto* rv = r->add_option("--version", version, "version number")->check(CLI::PositiveNumber);
  r->add_option("--label", label, "label")->excludes(rv);
  r->add_option("--vars", vars, "variables as a JSON object (default {})");

  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto db = gateway::open_sql_db(ledger);
  if (!db.ok()) return fail("prompts", db.status().message());
  gateway::SystemClock clock;
  gateway::PromptRegistry reg(std::shared_ptr<gateway::SqlDb>(std::move(*db)), clock);

  if (c->parsed()) {
    json body = {{"id", id}, {"labels", labels}, {"tenant", tenant}};
    std::string text;
    if (!messages_file.empty()) {
      if (!read_text(messages_file, &text)) return fail("prompts", "cannot read " + messages_file);
      json m = json::parse(text, nullptr, false);
      if (m.is_discarded()) return fail("prompts", messages_file + ": not valid JSON", 2);
      body["messages"] = m;
    } else if (!template_file.empty()) {
      if (!read_text(template_file, &text)) return fail("prompts", "cannot read " + template_file);
      body["template"] = text;
    } else if (!template_text.empty()) {
      body["template"] = template_text;
    } else {
      return fail("prompts", "give --messages-file, --template-file or --template", 2);
    }
    auto spec = server::parse_prompt_create(body.dump());
    if (!spec.ok()) return fail("prompts", spec.status().message(), 2);
    auto res = reg.create(*spec);
    if (!res.ok()) return fail("prompts", res.status().message());
    std::cout << (res->created ? "created " : "unchanged (identical to the latest) ") << res->version.id
              << " version " << res->version.version << " " << res->version.hash << "\n";
    return 0;
  }
  std::optional<std::string> scope;
  if (!tenant.empty()) scope = tenant;
  if (l->parsed()) {
    auto list = reg.list(scope);
    if (!list.ok()) return fail("prompts", list.status().message());
    if (as_json) {
      json a = json::array();
      for (const auto& s : *list)
        a.push_back({{"id", s.id}, {"tenant", s.tenant}, {"latest_version", s.latest_version},
                     {"versions", s.num_versions}, {"labels", s.labels}});
      std::cout << a.dump(2) << "\n";
      return 0;
    }
    std::printf("%-32s %-16s %7s %8s  %s\n", "id", "tenant", "latest", "versions", "labels");
    for (const auto& s : *list) {
      std::string ls;
      for (const auto& [k, v] : s.labels) ls += (ls.empty() ? "" : ", ") + k + "=" + std::to_string(v);
      std::printf("%-32s %-16s %7lld %8lld  %s\n", s.id.c_str(), s.tenant.empty() ? "(shared)" : s.tenant.c_str(),
                  static_cast<long long>(s.latest_version), static_cast<long long>(s.num_versions), ls.c_str());
    }
    return 0;
  }
  if (lb->parsed()) {
    Status st = reg.set_label(id, label, version);
    if (!st.ok()) return fail("prompts", st.message());
    std::cout << id << " " << label << " -> version " << version << "\n";
    return 0;
  }
  gateway::PromptRef ref{.id = id, .label = label};
  if (version > 0) ref.version = version;
  auto v = reg.get(ref, std::nullopt);
  if (!v.ok()) return fail("prompts", v.status().message());
  if (g->parsed()) {
    print_version(*v);
    return 0;
  }
  json vj = json::parse(vars, nullptr, false);
  if (!vj.is_object()) return fail("prompts", "--vars must be a JSON object", 2);
  auto msgs = server::render_prompt(*v, vj);
  if (!msgs.ok()) return fail("prompts", msgs.status().message());
  std::cout << msgs->dump(2) << "\n";
  return 0;
}

}  // namespace ts::cli
