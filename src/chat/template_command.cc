#include "chat/template_command.h"

#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace ts::chat {

namespace {

using ojson = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: tokenserve template -t FILE.jinja --messages FILE.json [--tools FILE.json]\n"
    "                           [--add-generation-prompt] [--bos S] [--eos S]\n"
    "                           [--now YYYY-MM-DDTHH:MM:SS] [--var NAME=JSON]...\n"
    "Renders a chat template exactly as Hugging Face transformers does and prints it.\n";

CommandOutput fail(int code, const std::string& message) {
  CommandOutput r;
  r.exit_code = code;
  r.err = "tokenserve template: " + message + "\n";
  return r;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  out = ss.str();
  return true;
}

std::optional<ojson> read_json(const std::string& path, const std::string& what, CommandOutput& error) {
  std::string text;
  if (!read_file(path, text)) {
    error = fail(2, "cannot read " + what + " file '" + path + "'");
    return std::nullopt;
  }
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error = fail(2, what + " file '" + path + "' is not valid JSON");
    return std::nullopt;
  }
  return j;
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

}  // namespace

CommandOutput run_template_command(const std::vector<std::string>& args) {
  std::string template_path, messages_path, tools_path, now_text;
  std::optional<std::string> bos, eos;
  bool add_generation_prompt = false, have_agp = false;
  std::vector<std::pair<std::string, std::string>> vars;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& dst) {
      if (i + 1 >= args.size()) return false;
      dst = args[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      CommandOutput r;
      r.out = kUsage;
      return r;
    } else if (a == "-t" || a == "--template") {
      if (!value(template_path)) return fail(2, a + " needs a file");
    } else if (a == "--messages") {
      if (!value(messages_path)) return fail(2, "--messages needs a file");
    } else if (a == "--tools") {
      if (!value(tools_path)) return fail(2, "--tools needs a file");
    } else if (a == "--add-generation-prompt") {
      add_generation_prompt = have_agp = true;
    } else if (a == "--bos") {
      if (!value(v)) return fail(2, "--bos needs a string");
      bos = v;
    } else if (a == "--eos") {
      if (!value(v)) return fail(2, "--eos needs a string");
      eos = v;
    } else if (a == "--now") {
      if (!value(now_text)) return fail(2, "--now needs a date-time");
    } else if (a == "--var") {
      if (!value(v)) return fail(2, "--var needs NAME=JSON");
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) return fail(2, "--var expects NAME=JSON, got '" + v + "'");
      vars.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else {
      return fail(2, "unknown argument '" + a + "' (see --help)");
    }
  }
  if (template_path.empty()) return fail(2, "missing -t FILE.jinja (see --help)");
  if (messages_path.empty()) return fail(2, "missing --messages FILE.json (see --help)");

  RenderOptions options;
  if (!now_text.empty()) {
    options.now = parse_datetime(now_text);
    if (!options.now) return fail(2, "--now expects YYYY-MM-DDTHH:MM:SS, got '" + now_text + "'");
  }

  std::string source;
  if (!read_file(template_path, source)) return fail(2, "cannot read template file '" + template_path + "'");

  CommandOutput error;
  auto messages = read_json(messages_path, "messages", error);
  if (!messages) return error;
  ojson context = ojson::object();
  if (messages->is_array()) {
    context["messages"] = *messages;
  } else if (messages->is_object() && messages->contains("messages") && (*messages)["messages"].is_array()) {
    context = *messages;
  } else {
    return fail(2, "messages file '" + messages_path + "' must hold a JSON array of messages or an object with a \"messages\" array");
  }
  if (!tools_path.empty()) {
    auto tools = read_json(tools_path, "tools", error);
    if (!tools) return error;
    if (!tools->is_array()) return fail(2, "tools file '" + tools_path + "' must hold a JSON array");
    context["tools"] = *tools;
  }
  if (have_agp || !context.contains("add_generation_prompt")) context["add_generation_prompt"] = add_generation_prompt;
  if (bos || !context.contains("bos_token")) context["bos_token"] = bos.value_or("");
  if (eos || !context.contains("eos_token")) context["eos_token"] = eos.value_or("");
  for (const auto& [name, text] : vars) {
    ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    context[name] = j.is_discarded() ? ojson(text) : j;
  }

  auto parsed = ChatTemplate::parse(source);
  if (!parsed.ok()) return fail(1, template_path + ": " + one_line(parsed.status().message()));
  auto rendered = parsed->render(context, options);
  if (!rendered.ok()) {
    CommandOutput r;
    r.exit_code = 1;
    r.err = one_line(rendered.status().message()) + "\n";
    return r;
  }
  CommandOutput r;
  r.out = std::move(*rendered);
  return r;
}

}  // namespace ts::chat
