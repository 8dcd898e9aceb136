// The prompt registry: prompts as versioned assets in the ledger's database (SQLite or
// PostgreSQL through SqlDb). A prompt id has immutable versions 1, 2, ... each identified by a
// SHA-256 content hash, and movable labels ("production", "staging", ...) naming one version.
// A version is either a list of chat messages whose contents are Jinja templates, or one Jinja
// template (sent as a single user message); the registry stores them, src/server/prompt_routes.h
// renders them. Each prompt id belongs to one tenant (the one it was created for; "" = shared by
// all tenants, readable by every key).
//
// Tables (created on first use): ts_prompts (id, version, hash, tenant, kind, content,
// variables, created_ms; primary key (id, version)) and ts_prompt_labels (id, label, version,
// updated_ms; primary key (id, label)).
//
// Failures: kInvalidArgument (bad id, label or spec; another tenant's id), kNotFound (unknown
// id, version or label), kUnavailable (database unreachable; nothing written), kInternal.
// A failed call changes nothing (each write is one transaction). Thread-safe (SqlDb is).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gateway/clock.h"
#include "gateway/sql_db.h"

namespace ts::gateway {

struct PromptSpec {
  std::string id;                      // [A-Za-z0-9._-]{1,128}
  std::string tenant;                  // owner; "" = shared
  std::string kind;                    // "messages" | "template"
  std::string content;                 // messages: JSON array text [{"role","content"}...];
                                       // template: the template source
  std::vector<std::string> variables;  // variables the content needs (sorted, from analysis)
  std::vector<std::string> labels;     // labels to point at the new (or identical) version
};

struct PromptVersion {
  std::string id;
  int64_t version = 0;
  std::string hash;                    // "sha256:<hex>" of kind + content
  std::string tenant;
  std::string kind;
  std::string content;
  std::vector<std::string> variables;
  WallTime created{};
  std::vector<std::string> labels;     // labels pointing at this version now
};

struct PromptSummary {
  std::string id;
  std::string tenant;
  int64_t latest_version = 0;
  int64_t num_versions = 0;
  std::map<std::string, int64_t> labels;  // label -> version
};

// Which version a caller asks for: an explicit version, a label, or (neither) the latest.
struct PromptRef {
  std::string id;
  std::optional<int64_t> version;
  std::string label;
};

struct CreateResult {
  PromptVersion version;
  bool created = false;                // false: identical to the latest version, which is returned
};

class PromptRegistry {
 public:
  PromptRegistry(std::shared_ptr<SqlDb> db, const Clock& clock);

  // Adds the next version of spec.id (version 1 for a new id) and points spec.labels at it.
  // Content identical to the latest version adds nothing and returns that version (labels are
  // still applied). kInvalidArgument when the id belongs to another tenant.
  Result<CreateResult> create(const PromptSpec& spec);
  // Prompts visible to `tenant` (nullopt = all, for admins): its own and shared ones.
  Result<std::vector<PromptSummary>> list(const std::optional<std::string>& tenant);
  // One version (with its labels). `tenant` as for list: another tenant's prompt is kNotFound.
  Result<PromptVersion> get(const PromptRef& ref, const std::optional<std::string>& tenant);
  // All versions of an id, oldest first.
  Result<std::vector<PromptVersion>> versions(const std::string& id,
                                              const std::optional<std::string>& tenant);
  // Points `label` at an existing version (moving it if it was elsewhere).
  Status set_label(const std::string& id, const std::string& label, int64_t version);

  // Validation shared with the HTTP layer and the CLI.
  static Status check_id(const std::string& id);
  static Status check_label(const std::string& label);
  // "sha256:<hex>" of kind and content.
  static std::string content_hash(const std::string& kind, const std::string& content);

 private:
  Status ensure_schema();
  Result<PromptVersion> load(const std::string& id, int64_t version);
  Result<std::string> owner(const std::string& id);  // kNotFound when unknown

  std::shared_ptr<SqlDb> db_;
  const Clock& clock_;
  std::atomic<bool> schema_ready_{false};
};

}  // namespace ts::gateway
