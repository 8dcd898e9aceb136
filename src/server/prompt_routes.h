// HTTP endpoints of the prompt registry (gateway/prompt_registry.h) and the server-side
// rendering of registered prompts with the chat-template Jinja engine (src/chat).
//
//   POST /v1/prompts                   admin: {"id", "messages" | "template", "labels"?: [..],
//                                      "tenant"?} -> 201 {"id","version","hash","created","labels"}
//                                      (200 with "created": false when identical to the latest)
//   GET  /v1/prompts                   {"object":"list","data":[{"id","tenant","latest_version",
//                                      "versions","labels":{label: version}}]}
//   GET  /v1/prompts/{id}[?version=N | ?label=L]   one version (default the latest)
//   GET  /v1/prompts/{id}/versions     {"object":"list","data":[version, ...]}
//   POST /v1/prompts/{id}/labels       admin: {"label","version"} -> {"id","label","version"}
//
// Scopes: the admin key ([admin] key_sha256) may do everything on every prompt; an API key may
// read its tenant's prompts and shared ones (others are 404); writes need admin (403). With
// --no-auth (require_auth false) every caller is admin. Bad bodies 400, unknown ids/versions/
// labels 404, all in OpenAI's error body.
//
// A chat request may carry "prompt": {"id", "version" | "label", "variables": {...}} instead
// of "messages": expand_prompt_reference() renders it into "messages" before the request is
// parsed. Each message content (or the single template, sent as one user message) is a Jinja
// template rendered with the variables; a variable the template needs and the request omits is
// a 400 naming it. Handlers are thread-safe; the registry and governor must outlive the server.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gateway/governor.h"
#include "gateway/prompt_registry.h"
#include "http/server.h"

namespace ts::server {

struct PromptRouteOptions {
  gateway::PromptRegistry* registry = nullptr;  // required
  gateway::Governor* governor = nullptr;        // admin key and API keys; null = everyone admin
  bool require_auth = false;                    // false (--no-auth): every caller is admin
};

void register_prompt_routes(http::Server& server, PromptRouteOptions options);

// Variables a prompt's templates read from the render context: every name used that is not
// set, looped over or defined inside the template, not a Jinja global (range, namespace, loop,
// ...), and not guarded by an `is defined` test anywhere. Sorted, unique. kInvalidArgument for
// a template syntax error (with line and column) or malformed messages JSON.
Result<std::vector<std::string>> prompt_variables(const std::string& kind, const std::string& content);

// Builds a registry spec from a POST /v1/prompts body. `tenant` from the body ("" = shared).
Result<gateway::PromptSpec> parse_prompt_create(const std::string& body);

// Renders a version with `variables` (a JSON object) into chat messages
// [{"role","content"}...]. kInvalidArgument naming missing variables or a template error.
Result<nlohmann::json> render_prompt(const gateway::PromptVersion& version, const nlohmann::json& variables);

struct PromptUse {
  std::string id;
  int64_t version = 0;
};

// When the chat body (JSON text) has a "prompt" object, resolves it for `tenant` (nullopt =
// any prompt), renders it and rewrites *body with "messages" in its place; returns which
// version was used. Returns nullopt (body untouched) when there is no "prompt" field or the
// body is not JSON (the normal parser reports that). Errors: kInvalidArgument (prompt and
// messages both given, malformed reference, missing variables), kNotFound (unknown id/label/
// version), kUnavailable (database). *param names the offending field for the error body.
Result<std::optional<PromptUse>> expand_prompt_reference(std::string* body, gateway::PromptRegistry& registry,
                                                         const std::optional<std::string>& tenant,
                                                         std::string* param);

}  // namespace ts::server
