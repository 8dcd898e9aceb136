// Python str methods on UTF-8 strings, as templates call them. Whitespace follows Python's
// str.isspace() (Unicode). Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and
// Cyrillic; other scripts are left unchanged (they are uncased or rare in chat templates).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/value.h"

namespace ts::chat {

bool py_isspace(uint32_t cp);
// str.strip/lstrip/rstrip; `chars` = the set of code points to strip (whitespace when unset).
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
// str.split / str.rsplit (sep unset: runs of whitespace, empty pieces dropped).
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old_s, const std::string& new_s,
                       int64_t count);
// "isdigit", "isalpha", "isspace", "islower", "isupper", "isalnum".
bool py_is(const std::string& s, const std::string& what);
// str.format with {} / {0} / {name} fields (no format specs beyond an empty one).
std::string brace_format(const std::string& fmt, const CallArgs& args);

}  // namespace ts::chat
