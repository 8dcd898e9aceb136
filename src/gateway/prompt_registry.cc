#include "gateway/prompt_registry.h"

#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "gateway/sha256.h"

namespace ts::gateway {

namespace {

using json = nlohmann::json;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS ts_prompts (
  id TEXT NOT NULL,
  version BIGINT NOT NULL,
  hash TEXT NOT NULL,
  tenant TEXT NOT NULL,
  kind TEXT NOT NULL,
  content TEXT NOT NULL,
  variables TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS ts_prompt_labels (
  id TEXT NOT NULL,
  label TEXT NOT NULL,
  version BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL,
  PRIMARY KEY (id, label)
);
)sql";

int64_t to_i64(const std::string& s) { return s.empty() ? 0 : std::strtoll(s.c_str(), nullptr, 10); }

bool name_chars_ok(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

std::vector<std::string> parse_vars(const std::string& text) {
  std::vector<std::string> out;
  json j = json::parse(text, nullptr, false);
  if (j.is_array())
    for (const auto& v : j)
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

bool visible(const std::string& owner, const std::optional<std::string>& tenant) {
  return !tenant || owner.empty() || owner == *tenant;
}

}  // namespace

PromptRegistry::PromptRegistry(std::shared_ptr<SqlDb> db, const Clock& clock)
    : db_(std::move(db)), clock_(clock) {}

Status PromptRegistry::check_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || !name_chars_ok(id))
    return invalid_argument("prompt id must be 1-128 characters of A-Z a-z 0-9 . _ -");
  return ok_status();
}

Status PromptRegistry::check_label(const std::string& label) {
  if (label.empty() || label.size() > 64 || !name_chars_ok(label) ||
      std::all_of(label.begin(), label.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return invalid_argument("label '" + label +
                            "' must be 1-64 characters of A-Z a-z 0-9 . _ - and not all digits");
  return ok_status();
}

std::string PromptRegistry::content_hash(const std::string& kind, const std::string& content) {
  std::string data = kind;
  data += '\0';
  data += content;
  return "sha256:" + sha256_hex(data);
}

Status PromptRegistry::ensure_schema() {
  if (schema_ready_.load()) return ok_status();
  Status st = db_->exec_script(kSchema);
  if (!st.ok() && st.code() != StatusCode::kUnavailable) st = db_->exec_script(kSchema);
  if (st.ok()) schema_ready_.store(true);
  return st;
}

Result<std::string> PromptRegistry::owner(const std::string& id) {
  SqlParam p[] = {id};
  TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT tenant FROM ts_prompts WHERE id = $1 LIMIT 1", p));
  if (rows.empty()) return not_found("unknown prompt id '" + id + "'");
  return rows[0][0];
}

Result<PromptVersion> PromptRegistry::load(const std::string& id, int64_t version) {
  SqlParam p[] = {id, version};
  TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT hash, tenant, kind, content, variables, created_ms "
                                            "FROM ts_prompts WHERE id = $1 AND version = $2", p));
  if (rows.empty())
    return not_found("prompt '" + id + "' has no version " + std::to_string(version));
  PromptVersion v;
  v.id = id;
  v.version = version;
  v.hash = rows[0][0];
  v.tenant = rows[0][1];
  v.kind = rows[0][2];
  v.content = rows[0][3];
  v.variables = parse_vars(rows[0][4]);
  v.created = from_unix_ms(to_i64(rows[0][5]));
  TS_ASSIGN_OR_RETURN(auto labels, db_->query("SELECT label FROM ts_prompt_labels WHERE id = $1 AND "
                                              "version = $2 ORDER BY label", p));
  for (const auto& r : labels) v.labels.push_back(r[0]);
  return v;
}

Result<CreateResult> PromptRegistry::create(const PromptSpec& spec) {
  TS_RETURN_IF_ERROR(check_id(spec.id));
  if (spec.kind != "messages" && spec.kind != "template")
    return invalid_argument("prompt kind must be 'messages' or 'template'");
  if (spec.content.empty()) return invalid_argument("prompt content is empty");
  for (const auto& l : spec.labels) TS_RETURN_IF_ERROR(check_label(l));
  TS_RETURN_IF_ERROR(ensure_schema());
  const std::string hash = content_hash(spec.kind, spec.content);
  CreateResult out;
  int64_t version = 0;
  Status st = db_->transaction([&]() -> Status {
    SqlParam pid[] = {spec.id};
    TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT version, hash, tenant FROM ts_prompts WHERE id = $1 "
                                              "ORDER BY version DESC LIMIT 1", pid));
    if (!rows.empty() && rows[0][2] != spec.tenant)
      return invalid_argument("prompt id '" + spec.id + "' belongs to " +
                              (rows[0][2].empty() ? std::string("no tenant (shared)") : "another tenant"));
    const int64_t latest = rows.empty() ? 0 : to_i64(rows[0][0]);
    const int64_t now = to_unix_ms(clock_.now());
    if (!rows.empty() && rows[0][1] == hash) {
      version = latest;
    } else {
      version = latest + 1;
      json vars = spec.variables;
      SqlParam p[] = {spec.id, version, hash, spec.tenant, spec.kind, spec.content, vars.dump(), now};
      TS_RETURN_IF_ERROR(db_->exec("INSERT INTO ts_prompts (id, version, hash, tenant, kind, content, "
                                   "variables, created_ms) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)", p));
      out.created = true;
    }
    for (const auto& l : spec.labels) {
      SqlParam lp[] = {spec.id, l, version, now};
      TS_RETURN_IF_ERROR(db_->exec("INSERT INTO ts_prompt_labels (id, label, version, updated_ms) VALUES "
                                   "($1,$2,$3,$4) ON CONFLICT (id, label) DO UPDATE SET version = "
                                   "excluded.version, updated_ms = excluded.updated_ms", lp));
    }
    return ok_status();
  });
  if (!st.ok()) {
    // Two creators racing for the same next version: the loser's insert hits the primary key.
    if (st.code() == StatusCode::kInvalidArgument && st.message().find("belongs to") == std::string::npos)
      return Status(StatusCode::kUnavailable, "prompt '" + spec.id + "' was changed concurrently; retry");
    return st;
  }
  TS_ASSIGN_OR_RETURN(out.version, load(spec.id, version));
  return out;
}

Result<std::vector<PromptSummary>> PromptRegistry::list(const std::optional<std::string>& tenant) {
  TS_RETURN_IF_ERROR(ensure_schema());
  TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT id, MIN(tenant), MAX(version), COUNT(*) FROM ts_prompts "
                                            "GROUP BY id ORDER BY id"));
  TS_ASSIGN_OR_RETURN(auto labels, db_->query("SELECT id, label, version FROM ts_prompt_labels ORDER BY id, label"));
  std::vector<PromptSummary> out;
  for (const auto& r : rows) {
    if (!visible(r[1], tenant)) continue;
    PromptSummary s{.id = r[0], .tenant = r[1], .latest_version = to_i64(r[2]), .num_versions = to_i64(r[3])};
    for (const auto& l : labels)
      if (l[0] == s.id) s.labels[l[1]] = to_i64(l[2]);
    out.push_back(std::move(s));
  }
  return out;
}

Result<PromptVersion> PromptRegistry::get(const PromptRef& ref, const std::optional<std::string>& tenant) {
  TS_RETURN_IF_ERROR(check_id(ref.id));
  TS_RETURN_IF_ERROR(ensure_schema());
  auto own = owner(ref.id);
  if (!own.ok()) return own.status();
  if (!visible(*own, tenant)) return not_found("unknown prompt id '" + ref.id + "'");
  int64_t version = 0;
  if (ref.version) {
    version = *ref.version;
  } else if (!ref.label.empty()) {
    SqlParam p[] = {ref.id, ref.label};
    TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT version FROM ts_prompt_labels WHERE id = $1 AND label = $2", p));
    if (rows.empty()) return not_found("prompt '" + ref.id + "' has no label '" + ref.label + "'");
    version = to_i64(rows[0][0]);
  } else {
    SqlParam p[] = {ref.id};
    TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT MAX(version) FROM ts_prompts WHERE id = $1", p));
    version = to_i64(rows[0][0]);
  }
  return load(ref.id, version);
}

Result<std::vector<PromptVersion>> PromptRegistry::versions(const std::string& id,
                                                            const std::optional<std::string>& tenant) {
  TS_ASSIGN_OR_RETURN(PromptVersion latest, get(PromptRef{.id = id}, tenant));
  std::vector<PromptVersion> out;
  for (int64_t v = 1; v <= latest.version; ++v) {
    TS_ASSIGN_OR_RETURN(PromptVersion pv, load(id, v));
    out.push_back(std::move(pv));
  }
  return out;
}

Status PromptRegistry::set_label(const std::string& id, const std::string& label, int64_t version) {
  TS_RETURN_IF_ERROR(check_id(id));
  TS_RETURN_IF_ERROR(check_label(label));
  TS_RETURN_IF_ERROR(ensure_schema());
  return db_->transaction([&]() -> Status {
    SqlParam p[] = {id, version};
    TS_ASSIGN_OR_RETURN(auto rows, db_->query("SELECT 1 FROM ts_prompts WHERE id = $1 AND version = $2", p));
    if (rows.empty()) {
      auto own = owner(id);
      if (!own.ok()) return own.status();
      return not_found("prompt '" + id + "' has no version " + std::to_string(version));
    }
    SqlParam lp[] = {id, label, version, to_unix_ms(clock_.now())};
    return db_->exec("INSERT INTO ts_prompt_labels (id, label, version, updated_ms) VALUES ($1,$2,$3,$4) "
                     "ON CONFLICT (id, label) DO UPDATE SET version = excluded.version, "
                     "updated_ms = excluded.updated_ms", lp);
  });
}

}  // namespace ts::gateway
