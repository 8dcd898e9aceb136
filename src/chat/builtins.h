// Jinja builtins: filters (`x | trim`), tests (`x is defined`) and global functions (range,
// namespace, dict, raise_exception, cycler, joiner), with jinja2's argument names and
// semantics. They throw JinjaError on bad arguments; raise_exception throws kRaised with the
// template's message verbatim.
#pragma once

#include <string_view>

#include "chat/value.h"

namespace ts::chat {

using FilterFn = Value (*)(const Value& subject, CallArgs& args);
using TestFn = bool (*)(const Value& subject, CallArgs& args);

// nullptr when there is no such filter/test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// Adds the global functions every template sees (strftime_now is added by the caller, which owns
// the clock).
void add_builtin_globals(ValueDict& globals);

// Argument access shared by builtins: positional index `i`, else keyword `name`, else `fallback`.
const Value& get_arg(const CallArgs& args, size_t i, std::string_view name, const Value& fallback);

}  // namespace ts::chat
