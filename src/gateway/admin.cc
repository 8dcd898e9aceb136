#include "gateway/admin.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gateway/keys.h"
#include "gateway/ledger.h"
#include "gateway/report.h"

namespace ts::gateway {
namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Result<std::unique_ptr<KeyStore>> open_keys(const std::string& ledger, const Clock& clock) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, open_sql_db(ledger));
  return std::make_unique<KeyStore>(std::shared_ptr<SqlDb>(std::move(db)), clock);
}

std::string join(const std::vector<std::string>& v, const char* empty) {
  if (v.empty()) return empty;
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<std::string> tier_names(const KeyInfo& k) {
  std::vector<std::string> out;
  for (auto t : k.tiers) out.push_back(engine::tier_name(t));
  return out;
}

void print_key(const KeyInfo& k, std::ostream& out) {
  out << "id:      " << k.id << "\n"
      << "tenant:  " << k.tenant << "\n"
      << "app:     " << k.app << "\n"
      << "models:  " << join(k.models, "(all)") << "\n"
      << "tiers:   " << join(tier_names(k), "(all)") << "\n"
      << "rpm:     " << (k.rpm ? std::to_string(k.rpm) : "(default)") << "\n"
      << "tpm:     " << (k.tpm ? std::to_string(k.tpm) : "(default)") << "\n"
      << "expires: " << (k.expires ? format_rfc3339(*k.expires) : "never") << "\n";
}

std::string key_state(const KeyInfo& k, WallTime now) {
  if (!k.enabled) return k.replaced_by.empty() ? "disabled" : "rotated";
  if (k.expires && now >= *k.expires) return "expired";
  return "active";
}

}  // namespace

Status keys_create(const KeysCreateArgs& a, const Clock& clock, std::ostream& out) {
  KeySpec spec{.tenant = a.tenant, .app = a.app, .models = split_list(a.models), .rpm = a.rpm,
               .tpm = a.tpm};
  for (const auto& t : split_list(a.tiers)) {
    TS_ASSIGN_OR_RETURN(engine::Tier tier, engine::parse_tier(t));
    spec.tiers.push_back(tier);
  }
  if (!a.expires.empty()) {
    TS_ASSIGN_OR_RETURN(WallTime t, parse_time_or_offset(a.expires, clock.now()));
    if (t <= clock.now()) return invalid_argument("--expires " + a.expires + " is in the past");
    spec.expires = t;
  }
  TS_ASSIGN_OR_RETURN(auto keys, open_keys(a.ledger, clock));
  TS_ASSIGN_OR_RETURN(CreatedKey created, keys->create(spec));
  print_key(created.info, out);
  out << "The key below is shown only once; store it now.\n" << created.secret << "\n";
  return ok_status();
}

Status keys_list(const std::string& ledger, const std::string& tenant, bool json,
                 const Clock& clock, std::ostream& out) {
  TS_ASSIGN_OR_RETURN(auto keys, open_keys(ledger, clock));
  TS_ASSIGN_OR_RETURN(auto list, keys->list(tenant));
  WallTime now = clock.now();
  if (json) {
    for (const KeyInfo& k : list) {
      nlohmann::ordered_json j;
      j["id"] = k.id;
      j["prefix"] = k.prefix;
      j["tenant"] = k.tenant;
      j["app"] = k.app;
      j["models"] = k.models;
      j["tiers"] = tier_names(k);
      j["rpm"] = k.rpm;
      j["tpm"] = k.tpm;
      j["created"] = format_rfc3339(k.created);
      j["expires"] = k.expires ? nlohmann::ordered_json(format_rfc3339(*k.expires)) : nullptr;
      j["state"] = key_state(k, now);
      if (!k.replaced_by.empty()) j["replaced_by"] = k.replaced_by;
      out << j.dump() << "\n";
    }
    return ok_status();
  }
  char line[512];
  std::snprintf(line, sizeof(line), "%-21s %-8s %-16s %-16s %-8s %-24s %s\n", "ID", "PREFIX",
                "TENANT", "APP", "STATE", "EXPIRES", "MODELS/TIERS");
  out << line;
  for (const KeyInfo& k : list) {
    std::snprintf(line, sizeof(line), "%-21s %-8s %-16s %-16s %-8s %-24s %s/%s\n", k.id.c_str(),
                  k.prefix.c_str(), k.tenant.c_str(), k.app.c_str(), key_state(k, now).c_str(),
                  k.expires ? format_rfc3339(*k.expires).c_str() : "never",
                  join(k.models, "*").c_str(), join(tier_names(k), "*").c_str());
    out << line;
  }
  return ok_status();
}

Status keys_disable(const std::string& ledger, const std::string& id, std::ostream& out) {
  SystemClock clock;
  TS_ASSIGN_OR_RETURN(auto keys, open_keys(ledger, clock));
  TS_RETURN_IF_ERROR(keys->disable(id));
  out << "disabled " << id << "\n";
  return ok_status();
}

Status keys_rotate(const std::string& ledger, const std::string& id, const Clock& clock,
                   std::ostream& out) {
  TS_ASSIGN_OR_RETURN(auto keys, open_keys(ledger, clock));
  TS_ASSIGN_OR_RETURN(CreatedKey created, keys->rotate(id));
  out << "rotated " << id << " -> " << created.info.id << " (the old key no longer works)\n";
  print_key(created.info, out);
  out << "The key below is shown only once; store it now.\n" << created.secret << "\n";
  return ok_status();
}

Status usage_report(const UsageArgs& a, std::ostream& out) {
  LedgerFilter filter{.tenant = a.tenant};
  if (!a.from.empty()) {
    TS_ASSIGN_OR_RETURN(filter.from, parse_rfc3339(a.from));
  }
  if (!a.to.empty()) {
    TS_ASSIGN_OR_RETURN(WallTime to, parse_rfc3339(a.to));
    if (a.to.size() == 10) to += std::chrono::days(1);  // a bare date includes that day
    filter.to = to;
  }
  if (filter.from && filter.to && *filter.to <= *filter.from)
    return invalid_argument("--to must be after --from");
  std::map<std::string, Price> prices;
  if (!a.config_path.empty()) {
    TS_ASSIGN_OR_RETURN(GovConfig cfg, load_config(a.config_path));
    prices = cfg.prices;
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<SqlDb> db, open_sql_db(a.ledger));
  auto ledger = make_sql_ledger(std::shared_ptr<SqlDb>(std::move(db)));
  if (!a.export_replay.empty()) {
    std::ofstream file(a.export_replay, std::ios::binary | std::ios::trunc);
    if (!file) return invalid_argument("cannot write " + a.export_replay);
    TS_ASSIGN_OR_RETURN(int64_t n, export_replay(*ledger, filter, file));
    file.close();
    if (!file) return internal_error("error writing " + a.export_replay);
    out << "wrote " << n << " requests to " << a.export_replay << "\n";
    return ok_status();
  }
  TS_ASSIGN_OR_RETURN(GroupBy by, parse_group_by(a.by));
  TS_ASSIGN_OR_RETURN(ReportFormat format, parse_report_format(a.format));
  TS_ASSIGN_OR_RETURN(Report rep, build_report(*ledger, by, filter, prices));
  out << format_report(rep, format);
  return ok_status();
}

}  // namespace ts::gateway
