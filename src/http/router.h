// Routing by method + path pattern. Patterns are '/'-separated literal segments and parameters:
// "{name}" matches one non-empty segment; "{name*}" as the last segment matches the rest of the
// path (one or more segments, slashes kept), for ids such as "org/model".
// Not thread-safe to add routes while matching; the server freezes it at start().
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/message.h"

namespace ts::http {

class Router {
 public:
  // Adds a route. Routes are tried in insertion order; the first match wins.
  void add(Method method, std::string pattern, Handler handler);

  enum class MatchKind { kFound, kNoPath, kMethodNotAllowed };
  struct Match {
    MatchKind kind = MatchKind::kNoPath;
    const Handler* handler = nullptr;                          // when kFound
    std::vector<std::pair<std::string, std::string>> params;   // when kFound
    std::vector<Method> allowed;                               // when kMethodNotAllowed
  };
  // `path` is the raw path (no query). A HEAD request matches GET routes too.
  Match match(Method method, std::string_view path) const;

  bool empty() const { return routes_.empty(); }

 private:
  struct Segment {
    std::string text;  // literal text, or the parameter name
    bool param = false;
    bool rest = false;  // "{name*}"
  };
  struct Route {
    Method method;
    std::vector<Segment> segments;
    Handler handler;
  };
  static bool match_route(const Route& r, std::string_view path,
                          std::vector<std::pair<std::string, std::string>>* params);
  std::vector<Route> routes_;
};

}  // namespace ts::http
