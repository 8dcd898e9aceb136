// A strict reader of the Prometheus text format (0.0.4) for tests: every line must be a
// comment (# HELP / # TYPE), blank, or `name{label="value",...} value`. Parse errors are
// reported through `error`, so a malformed exposition fails the test that reads it.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ts::obs::testing {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram
  std::map<std::string, std::string> help;   // family -> help text
  std::string error;                         // first parse error, "" when fine

  // Sum of the samples named `name` whose labels include every pair of `match`.
  double sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double total = 0;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : match) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) ok = false;
      }
      if (ok) total += s.value;
    }
    return total;
  }
  size_t count(const std::string& name) const {
    size_t n = 0;
    for (const auto& s : samples) n += s.name == name;
    return n;
  }
};

inline bool prom_name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

inline Exposition parse_prometheus(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto fail = [&](const std::string& why) {
    if (e.error.empty()) e.error = "line " + std::to_string(lineno) + ": " + why + ": " + line;
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line.substr(1));
      std::string kind, name;
      c >> kind >> name;
      std::string rest;
      std::getline(c, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "TYPE") e.types[name] = rest;
      else if (kind == "HELP") e.help[name] = rest;
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && prom_name_char(line[i], i == 0)) ++i;
    if (i == 0) { fail("bad metric name"); continue; }
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t start = i;
        while (i < line.size() && prom_name_char(line[i], i == start) && line[i] != ':') ++i;
        std::string key = line.substr(start, i - start);
        if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
          fail("bad label");
          break;
        }
        i += 2;
        std::string val;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            char n = line[i + 1];
            val += n == 'n' ? '\n' : n;
            i += 2;
          } else {
            val += line[i++];
          }
        }
        if (i >= line.size()) { fail("unterminated label value"); break; }
        ++i;  // closing quote
        s.labels[key] = val;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') { fail("unterminated labels"); continue; }
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') { fail("missing value"); continue; }
    std::string v = line.substr(i + 1);
    if (v == "+Inf") s.value = std::numeric_limits<double>::infinity();
    else if (v == "-Inf") s.value = -std::numeric_limits<double>::infinity();
    else if (v == "NaN") s.value = std::numeric_limits<double>::quiet_NaN();
    else {
      char* end = nullptr;
      s.value = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') { fail("bad value"); continue; }
    }
    e.samples.push_back(std::move(s));
  }
  return e;
}

}  // namespace ts::obs::testing
