#include "http/router.h"

#include <algorithm>

namespace ts::http {

namespace {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  if (!path.empty() && path[0] == '/') i = 1;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

void Router::add(Method method, std::string pattern, Handler handler) {
  Route r{.method = method, .segments = {}, .handler = std::move(handler)};
  for (std::string_view s : split_path(pattern)) {
    Segment seg;
    if (s.size() >= 2 && s.front() == '{' && s.back() == '}') {
      seg.param = true;
      std::string_view name = s.substr(1, s.size() - 2);
      if (!name.empty() && name.back() == '*') {
        seg.rest = true;
        name.remove_suffix(1);
      }
      seg.text = std::string(name);
    } else {
      seg.text = std::string(s);
    }
    r.segments.push_back(std::move(seg));
  }
  routes_.push_back(std::move(r));
}

bool Router::match_route(const Route& r, std::string_view path,
                         std::vector<std::pair<std::string, std::string>>* params) {
  std::vector<std::string_view> parts = split_path(path);
  params->clear();
  size_t i = 0;
  for (size_t k = 0; k < r.segments.size(); ++k) {
    const Segment& seg = r.segments[k];
    if (seg.rest) {
      if (i >= parts.size()) return false;
      // The rest of the raw path, from this segment on.
      size_t offset = 0;
      for (size_t m = 0; m < i; ++m) offset += parts[m].size() + 1;
      std::string_view rest = path.substr((path.empty() || path[0] != '/' ? 0 : 1) + offset);
      if (rest.empty()) return false;
      std::string decoded;
      if (!percent_decode(rest, &decoded)) return false;
      params->emplace_back(seg.text, std::move(decoded));
      return true;
    }
    if (i >= parts.size()) return false;
    if (seg.param) {
      if (parts[i].empty()) return false;
      std::string decoded;
      if (!percent_decode(parts[i], &decoded)) return false;
      params->emplace_back(seg.text, std::move(decoded));
    } else if (parts[i] != seg.text) {
      return false;
    }
    ++i;
  }
  return i == parts.size();
}

Router::Match Router::match(Method method, std::string_view path) const {
  Match m;
  std::vector<std::pair<std::string, std::string>> params;
  for (const Route& r : routes_) {
    if (!match_route(r, path, &params)) continue;
    if (r.method == method || (method == Method::kHead && r.method == Method::kGet)) {
      m.kind = MatchKind::kFound;
      m.handler = &r.handler;
      m.params = std::move(params);
      m.allowed.clear();
      return m;
    }
    m.kind = MatchKind::kMethodNotAllowed;
    if (std::find(m.allowed.begin(), m.allowed.end(), r.method) == m.allowed.end())
      m.allowed.push_back(r.method);
  }
  return m;
}

}  // namespace ts::http
