#include "chat/chat_template.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <new>

#include "chat/builtins.h"
#include "chat/parser.h"

namespace ts::chat {

namespace {

std::string where(const JinjaError& e) {
  if (e.line() <= 0) return "";
  return " at line " + std::to_string(e.line()) + ", column " + std::to_string(e.column());
}

Status to_status(const JinjaError& e) {
  switch (e.kind()) {
    case ErrorKind::kSyntax: return invalid_argument("template syntax error" + where(e) + ": " + e.what());
    case ErrorKind::kRaised: return invalid_argument(e.what());
    case ErrorKind::kLimit: return resource_exhausted("template limit exceeded" + where(e) + ": " + e.what());
    case ErrorKind::kRuntime: break;
  }
  return invalid_argument("template error" + where(e) + ": " + e.what());
}

std::tm local_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  try {
    return ChatTemplate(std::make_shared<const Body>(parse_template(source)));
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("template too large to parse");
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  try {
    return render_value(from_json(context), options);
  } catch (const JinjaError& e) {
    return invalid_argument(std::string("chat template context: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context,
                                         const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  try {
    return render_value(from_json(context), options);
  } catch (const JinjaError& e) {
    return invalid_argument(std::string("chat template context: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render_value(const Value& context, const RenderOptions& options) const {
  ValueDict globals;
  add_builtin_globals(globals);
  std::tm now = options.now ? *options.now : local_now();
  globals.set("strftime_now", Value::callable("strftime_now", [now](CallArgs& a) {
    const Value& fmt = get_arg(a, 0, "format", Value());
    if (!fmt.is_string()) throw_runtime("strftime_now() argument must be str, not " + type_name(fmt));
    return Value::from_string(format_time(now, fmt.str()));
  }));
  for (const auto& [k, v] : context.dict_items().entries) globals.set(k, v);
  try {
    Interpreter interpreter(options.limits);
    return interpreter.render(*body_, globals);
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("template rendering ran out of memory");
  } catch (const std::exception& e) {
    return internal_error(std::string("template rendering failed: ") + e.what());
  }
}

Result<std::string> render(const std::string& template_src, const nlohmann::ordered_json& context,
                           const RenderOptions& options) {
  TS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(template_src));
  return t.render(context, options);
}

Result<std::string> render(const std::string& template_src, const nlohmann::json& context,
                           const RenderOptions& options) {
  TS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(template_src));
  return t.render(context, options);
}

std::string default_chatml_template() {
  return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
         "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
         "{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

std::optional<std::tm> parse_datetime(std::string_view text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::string buf(text);
  int consumed = 0;
  bool ok = false;
  if (std::sscanf(buf.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &consumed) == 3 &&
      consumed == static_cast<int>(buf.size())) {
    ok = true;
  } else if (buf.size() > 10 && (buf[10] == 'T' || buf[10] == ' ')) {
    consumed = 0;
    buf[10] = 'T';
    ok = std::sscanf(buf.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) == 6 &&
         consumed == static_cast<int>(buf.size());
  }
  if (!ok || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 || h < 0 ||
      mi < 0 || s < 0 || y < 1) {
    return std::nullopt;
  }
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  // Normalize through UTC arithmetic to fill in weekday and day of year without a time zone.
  std::tm copy = tm;
  std::time_t t = timegm(&copy);
  std::tm norm{};
  gmtime_r(&t, &norm);
  if (norm.tm_mday != d || norm.tm_mon != mo - 1) return std::nullopt;  // e.g. Feb 30
  return norm;
}

std::string format_time(const std::tm& now, const std::string& format) {
  if (format.empty()) return "";
  if (format.size() > 1024) throw_runtime("strftime format too long");
  // strftime returns 0 both for "too small" and for an empty result; a trailing marker tells
  // them apart.
  std::string fmt = format + "\x01";
  std::string out(fmt.size() * 8 + 64, '\0');
  for (int attempt = 0; attempt < 4; ++attempt) {
    size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &now);
    if (n > 0) {
      out.resize(n - 1);
      return out;
    }
    out.resize(out.size() * 4);
  }
  throw_runtime("strftime result too long");
}

}  // namespace ts::chat
