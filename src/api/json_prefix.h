// The certain part of a JSON object being written (streamed tool-call arguments): the compact
// text nlohmann's (ordered_json) dump() would give for the whole object, as far as the text so
// far fixes it. Whitespace outside strings is dropped; string characters are sent as they come,
// re-escaped as dump() writes them (\u escapes decoded, "\/" as "/", control characters
// escaped); an escape, surrogate pair or UTF-8 character cut at the end waits; numbers and
// literals wait until they end (1e2 -> 100.0, 1.50 -> 1.5). Key order is kept (so the complete
// arguments must be dumped from an ordered_json for the prefix property to hold; duplicate keys
// are the one case where it does not). Pure function; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ts::api {

struct JsonPrefix {
  std::string out;        // compact text so far
  bool complete = false;  // the object closed (out is the whole compact object)
  bool error = false;     // the text is not JSON: nothing after `out` is certain
};

// `s` starts with the object's '{' (an empty `s` gives an empty, non-error prefix).
JsonPrefix canonical_json_object_prefix(std::string_view s);

}  // namespace ts::api
