#include "tools/eval_suite.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "tools/eval_scorers.h"

namespace ts::tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* scorer_name(Scorer s) {
  switch (s) {
    case Scorer::kExact: return "exact";
    case Scorer::kContains: return "contains";
    case Scorer::kRegex: return "regex";
    case Scorer::kJsonSchema: return "json_schema";
    case Scorer::kNumber: return "number";
    case Scorer::kChoice: return "choice";
  }
  return "?";
}

int64_t EvalSuite::num_cases() const {
  int64_t n = 0;
  for (const auto& l : layers) n += static_cast<int64_t>(l.cases.size());
  return n;
}

namespace {

Status field_error(const std::string& where, const char* field, const std::string& why) {
  return invalid_argument(where + ": field '" + field + "': " + why);
}

bool parse_scorer(const std::string& s, Scorer* out) {
  static const std::pair<const char*, Scorer> kNames[] = {
      {"exact", Scorer::kExact},   {"contains", Scorer::kContains},
      {"regex", Scorer::kRegex},   {"json_schema", Scorer::kJsonSchema},
      {"number", Scorer::kNumber}, {"choice", Scorer::kChoice}};
  for (auto& [n, v] : kNames)
    if (s == n) {
      *out = v;
      return true;
    }
  return false;
}

}  // namespace

Result<EvalCase> parse_case(const std::string& line, const std::string& layer,
                            const std::string& where) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return invalid_argument(where + ": not valid JSON");
  if (!j.is_object()) return invalid_argument(where + ": a case must be a JSON object");
  EvalCase c;
  c.layer = layer;
  c.raw = j;
  if (!j.contains("id")) return field_error(where, "id", "missing");
  if (j["id"].is_string()) c.id = j["id"].get<std::string>();
  else if (j["id"].is_number_integer()) c.id = std::to_string(j["id"].get<int64_t>());
  else return field_error(where, "id", "must be a string or an integer");
  if (c.id.empty()) return field_error(where, "id", "must not be empty");

  const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
  if (has_prompt == has_messages)
    return field_error(where, has_prompt ? "messages" : "prompt",
                       "exactly one of 'prompt' and 'messages' is required");
  if (has_prompt) {
    if (!j["prompt"].is_string()) return field_error(where, "prompt", "must be a string");
    c.prompt = j["prompt"].get<std::string>();
  } else {
    const json& m = j["messages"];
    if (!m.is_array() || m.empty()) return field_error(where, "messages", "must be a non-empty array");
    c.chat = true;
    for (size_t i = 0; i < m.size(); ++i) {
      const std::string f = "messages[" + std::to_string(i) + "]";
      if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string() ||
          !m[i].contains("content") || !m[i]["content"].is_string())
        return field_error(where, f.c_str(), "must be {\"role\": string, \"content\": string}");
      c.messages.push_back({m[i]["role"].get<std::string>(), m[i]["content"].get<std::string>()});
    }
  }

  if (!j.contains("scorer")) return field_error(where, "scorer", "missing");
  if (!j["scorer"].is_string() || !parse_scorer(j["scorer"].get<std::string>(), &c.scorer))
    return field_error(where, "scorer",
                       "unknown scorer " + j["scorer"].dump() +
                           " (exact | contains | regex | json_schema | number | choice)");
  if (!j.contains("expected")) return field_error(where, "expected", "missing");
  c.expected = j["expected"];
  const json& e = c.expected;
  switch (c.scorer) {
    case Scorer::kExact:
    case Scorer::kChoice:
      if (!e.is_string()) return field_error(where, "expected", "must be a string for this scorer");
      break;
    case Scorer::kContains:
      if (e.is_array()) {
        if (e.empty()) return field_error(where, "expected", "must not be an empty array");
        for (const auto& s : e)
          if (!s.is_string()) return field_error(where, "expected", "array items must be strings");
      } else if (!e.is_string()) {
        return field_error(where, "expected", "must be a string or an array of strings");
      }
      break;
    case Scorer::kRegex: {
      if (!e.is_string()) return field_error(where, "expected", "must be a regex string");
      Status st = check_regex(e.get<std::string>());
      if (!st.ok()) return field_error(where, "expected", st.message());
      break;
    }
    case Scorer::kJsonSchema: {
      if (!e.is_object()) return field_error(where, "expected", "must be a JSON Schema object");
      Status st = check_json_schema(e);
      if (!st.ok()) return field_error(where, "expected", st.message());
      break;
    }
    case Scorer::kNumber:
      if (!e.is_number()) return field_error(where, "expected", "must be a number");
      break;
  }
  if (j.contains("max_tokens")) {
    if (!j["max_tokens"].is_number_integer() || j["max_tokens"].get<int64_t>() < 1 ||
        j["max_tokens"].get<int64_t>() > (int64_t{1} << 20))
      return field_error(where, "max_tokens", "must be an integer in [1, 1048576]");
    c.max_tokens = j["max_tokens"].get<int64_t>();
  }
  if (j.contains("temperature")) {
    if (!j["temperature"].is_number() || j["temperature"].get<double>() < 0 ||
        j["temperature"].get<double>() > 2)
      return field_error(where, "temperature", "must be a number in [0, 2]");
    c.temperature = j["temperature"].get<double>();
  }
  if (j.contains("stop")) {
    const json& s = j["stop"];
    bool ok = s.is_string() || s.is_null();
    if (s.is_array()) {
      ok = true;
      for (const auto& x : s) ok = ok && x.is_string();
    }
    if (!ok) return field_error(where, "stop", "must be a string or an array of strings");
    c.stop = s;
  }
  if (j.contains("tolerance")) {
    if (!j["tolerance"].is_number() || j["tolerance"].get<double>() < 0)
      return field_error(where, "tolerance", "must be a number >= 0");
    c.tolerance = j["tolerance"].get<double>();
  }
  if (j.contains("ignore_case")) {
    if (!j["ignore_case"].is_boolean()) return field_error(where, "ignore_case", "must be true or false");
    c.ignore_case = j["ignore_case"].get<bool>();
  }
  if (j.contains("choices")) {
    const json& ch = j["choices"];
    if (!ch.is_array() || ch.empty()) return field_error(where, "choices", "must be a non-empty array of strings");
    for (const auto& x : ch) {
      if (!x.is_string() || x.get<std::string>().empty())
        return field_error(where, "choices", "must be a non-empty array of non-empty strings");
      c.choices.push_back(x.get<std::string>());
    }
  }
  if (c.scorer == Scorer::kChoice && !c.choices.empty() &&
      std::find(c.choices.begin(), c.choices.end(), e.get<std::string>()) == c.choices.end())
    return field_error(where, "expected", "must be one of 'choices'");
  return c;
}

Result<EvalSuite> load_suite(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("suite folder '" + dir + "' not found");
  EvalSuite suite;
  suite.dir = dir;
  std::vector<fs::path> layer_dirs;
  for (const auto& ent : fs::directory_iterator(dir, ec)) {
    if (ent.is_directory()) layer_dirs.push_back(ent.path());
    else if (ent.path().extension() == ".jsonl")
      return invalid_argument(ent.path().string() +
                              ": case files must be inside a layer sub-folder (e.g. " + dir +
                              "/benchmark/)");
  }
  if (ec) return invalid_argument("cannot list suite folder '" + dir + "': " + ec.message());
  std::sort(layer_dirs.begin(), layer_dirs.end());
  for (const fs::path& ld : layer_dirs) {
    EvalLayer layer;
    layer.name = ld.filename().string();
    std::vector<fs::path> files;
    for (const auto& ent : fs::directory_iterator(ld, ec))
      if (ent.is_regular_file() && ent.path().extension() == ".jsonl") files.push_back(ent.path());
    std::sort(files.begin(), files.end());
    std::set<std::string> ids;
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) return invalid_argument(f.string() + ": cannot be read");
      std::string line;
      int64_t num = 0;
      while (std::getline(in, line)) {
        ++num;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        const std::string where = f.string() + ":" + std::to_string(num);
        auto c = parse_case(line, layer.name, where);
        if (!c.ok()) return c.status();
        if (!ids.insert(c->id).second)
          return invalid_argument(where + ": field 'id': duplicate id '" + c->id + "' in layer '" +
                                  layer.name + "'");
        c->file = f.string();
        c->line = num;
        c->raw_line = line;
        layer.cases.push_back(std::move(*c));
      }
      if (in.bad()) return invalid_argument(f.string() + ": read error");
    }
    if (!layer.cases.empty()) suite.layers.push_back(std::move(layer));
  }
  if (suite.layers.empty())
    return invalid_argument("suite '" + dir + "' has no layers with cases (expected sub-folders of .jsonl files)");
  return suite;
}

std::string case_input_text(const EvalCase& c) {
  if (!c.chat) return c.prompt;
  std::string s;
  for (const auto& m : c.messages) {
    if (!s.empty()) s += '\n';
    s += m.content;
  }
  return s;
}

}  // namespace ts::tools
