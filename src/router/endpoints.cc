#include "router/endpoints.h"

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

namespace ts::router {
namespace {

// A parsed YAML value: scalar, mapping (in order) or sequence.
struct Node {
  enum class Kind { kScalar, kMap, kSeq } kind = Kind::kScalar;
  std::string scalar;
  std::vector<std::pair<std::string, Node>> map;
  std::vector<Node> seq;
  int line = 0;
};

struct Line {
  int number = 0;   // 1-based
  int indent = 0;   // leading spaces
  std::string text; // without indent, comment and trailing blanks
};

Status err(int line, const std::string& what) {
  return invalid_argument("line " + std::to_string(line) + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Drops a `#` comment (at the start or after a blank) outside quotes.
std::string_view strip_comment(std::string_view s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

Result<std::vector<Line>> split_lines(std::string_view text) {
  std::vector<Line> out;
  int number = 0;
  size_t pos = 0;
  bool seen_doc_start = false;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    int indent = 0;
    while (static_cast<size_t>(indent) < raw.size() && raw[static_cast<size_t>(indent)] == ' ') ++indent;
    std::string_view rest = raw.substr(static_cast<size_t>(indent));
    if (!rest.empty() && rest.front() == '\t') return err(number, "tabs are not allowed for indentation");
    rest = trim(strip_comment(rest));
    if (rest.empty()) continue;
    if (rest == "---" && indent == 0) {
      if (seen_doc_start || !out.empty()) return err(number, "only one YAML document is supported");
      seen_doc_start = true;
      continue;
    }
    if (rest == "..." && indent == 0) break;
    char c = rest.front();
    if (c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '?')
      return err(number, std::string("unsupported YAML syntax '") + c + "'");
    out.push_back(Line{.number = number, .indent = indent, .text = std::string(rest)});
    if (end == text.size()) break;
  }
  return out;
}

// Unquotes a scalar; refuses anchors, aliases, tags and block scalars in values.
Result<std::string> scalar_value(std::string_view v, int line) {
  v = trim(v);
  if (v.empty()) return std::string();
  char c = v.front();
  if (c == '"' || c == '\'') {
    if (v.size() < 2 || v.back() != c) return err(line, "unterminated quoted string");
    std::string out;
    std::string_view body = v.substr(1, v.size() - 2);
    for (size_t i = 0; i < body.size(); ++i) {
      if (c == '\'' && body[i] == '\'' && i + 1 < body.size() && body[i + 1] == '\'') {
        out.push_back('\'');
        ++i;
      } else if (c == '"' && body[i] == '\\' && i + 1 < body.size()) {
        char e = body[++i];
        out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
      } else {
        out.push_back(body[i]);
      }
    }
    return out;
  }
  if (c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '[' || c == '{' || c == '@' || c == '`')
    return err(line, "unsupported YAML value '" + std::string(v) + "'");
  return std::string(v);
}

// Splits "key: value" at the first ':' outside quotes followed by a blank or the end.
// Returns false when the text is not a mapping entry.
bool split_key(std::string_view s, std::string_view* key, std::string_view* value) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if ((c == '\'' || c == '"') && i == 0) {
      quote = c;
    } else if (c == ':' && (i + 1 == s.size() || s[i + 1] == ' ')) {
      *key = trim(s.substr(0, i));
      *value = trim(s.substr(i + 1));
      return true;
    }
  }
  return false;
}

// One-line flow mapping "{a: 1, b: 'x'}" (no nesting).
Result<Node> parse_flow_map(std::string_view s, int line) {
  if (s.size() < 2 || s.back() != '}') return err(line, "unterminated flow mapping");
  Node n{.kind = Node::Kind::kMap, .line = line};
  std::string_view body = trim(s.substr(1, s.size() - 2));
  while (!body.empty()) {
    size_t cut = body.size();
    char quote = 0;
    for (size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (quote) {
        if (c == quote) quote = 0;
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if ((c == '{' || c == '[') && i + 1 < body.size() && body[i + 1] == (c == '{' ? '}' : ']')) {
        ++i;  // an empty {} or [] value
      } else if (c == '{' || c == '[') {
        return err(line, "nested flow collections are not supported (only {} and [])");
      } else if (c == ',') {
        cut = i;
        break;
      }
    }
    std::string_view item = trim(body.substr(0, cut));
    body = cut < body.size() ? trim(body.substr(cut + 1)) : std::string_view();
    if (item.empty()) continue;
    std::string_view k, v;
    if (!split_key(item, &k, &v)) return err(line, "expected 'key: value' in flow mapping, got '" + std::string(item) + "'");
    TS_ASSIGN_OR_RETURN(std::string key, scalar_value(k, line));
    if (v == "{}" || v == "[]") {
      n.map.emplace_back(std::move(key), Node{.kind = v == "{}" ? Node::Kind::kMap : Node::Kind::kSeq, .line = line});
      continue;
    }
    TS_ASSIGN_OR_RETURN(std::string val, scalar_value(v, line));
    n.map.emplace_back(std::move(key), Node{.scalar = std::move(val), .line = line});
  }
  return n;
}

class BlockParser {
 public:
  explicit BlockParser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  Result<Node> parse_document() {
    if (lines_.empty()) return Node{.kind = Node::Kind::kMap};
    if (lines_[0].indent != 0) return err(lines_[0].number, "the document must start at column 1");
    TS_ASSIGN_OR_RETURN(Node root, parse_block(0));
    if (i_ < lines_.size()) return err(lines_[i_].number, "unexpected indentation");
    return root;
  }

 private:
  static bool is_item(const Line& l) { return l.text == "-" || l.text.starts_with("- "); }

  Result<Node> parse_block(int indent) {
    if (is_item(lines_[i_])) return parse_seq(indent);
    return parse_map(indent);
  }

  Result<Node> value_after_key(std::string_view v, int indent, int line, bool allow_same_indent_seq) {
    if (v.empty()) {
      if (i_ < lines_.size() && lines_[i_].indent > indent) return parse_block(lines_[i_].indent);
      if (allow_same_indent_seq && i_ < lines_.size() && lines_[i_].indent == indent && is_item(lines_[i_]))
        return parse_seq(indent);
      return Node{.line = line};  // empty value
    }
    if (v == "{}") return Node{.kind = Node::Kind::kMap, .line = line};
    if (v.front() == '{') return parse_flow_map(v, line);
    if (v.front() == '[') {
      if (v == "[]") return Node{.kind = Node::Kind::kSeq, .line = line};
      return err(line, "flow sequences are not supported (only [])");
    }
    TS_ASSIGN_OR_RETURN(std::string s, scalar_value(v, line));
    if (i_ < lines_.size() && lines_[i_].indent > indent)
      return err(lines_[i_].number, "unexpected indentation (multi-line scalars are not supported)");
    return Node{.scalar = std::move(s), .line = line};
  }

  Result<Node> parse_map(int indent) {
    Node n{.kind = Node::Kind::kMap, .line = lines_[i_].number};
    std::set<std::string> keys;
    while (i_ < lines_.size() && lines_[i_].indent == indent && !is_item(lines_[i_])) {
      const Line l = lines_[i_++];
      std::string_view k, v;
      if (!split_key(l.text, &k, &v)) return err(l.number, "expected 'key: value', got '" + l.text + "'");
      TS_ASSIGN_OR_RETURN(std::string key, scalar_value(k, l.number));
      if (!keys.insert(key).second) return err(l.number, "duplicate key '" + key + "'");
      TS_ASSIGN_OR_RETURN(Node child, value_after_key(v, indent, l.number, true));
      n.map.emplace_back(std::move(key), std::move(child));
    }
    if (i_ < lines_.size() && lines_[i_].indent > indent) return err(lines_[i_].number, "unexpected indentation");
    return n;
  }

  Result<Node> parse_seq(int indent) {
    Node n{.kind = Node::Kind::kSeq, .line = lines_[i_].number};
    while (i_ < lines_.size() && lines_[i_].indent == indent && is_item(lines_[i_])) {
      Line& l = lines_[i_];
      std::string_view rest = trim(std::string_view(l.text).substr(1));
      if (rest.empty()) {
        ++i_;
        if (i_ >= lines_.size() || lines_[i_].indent <= indent) {
          n.seq.push_back(Node{.line = l.number});
          continue;
        }
        TS_ASSIGN_OR_RETURN(Node child, parse_block(lines_[i_].indent));
        n.seq.push_back(std::move(child));
        continue;
      }
      std::string_view k, v;
      if (rest.front() == '{') {
        ++i_;
        TS_ASSIGN_OR_RETURN(Node child, parse_flow_map(rest, l.number));
        n.seq.push_back(std::move(child));
      } else if (split_key(rest, &k, &v)) {
        // "- key: value": a mapping whose first line shares the dash; its column is the key's.
        int offset = static_cast<int>(l.text.size() - rest.size());
        l.indent += offset;
        l.text = std::string(rest);
        TS_ASSIGN_OR_RETURN(Node child, parse_map(l.indent));
        n.seq.push_back(std::move(child));
      } else {
        ++i_;
        TS_ASSIGN_OR_RETURN(std::string s, scalar_value(rest, l.number));
        n.seq.push_back(Node{.scalar = std::move(s), .line = l.number});
      }
    }
    return n;
  }

  std::vector<Line> lines_;
  size_t i_ = 0;
};

Result<uint16_t> parse_port(const Node& n) {
  if (n.kind != Node::Kind::kScalar || n.scalar.empty() || n.scalar.size() > 5)
    return err(n.line, "port must be a number 1..65535");
  int v = 0;
  for (char c : n.scalar) {
    if (c < '0' || c > '9') return err(n.line, "port must be a number 1..65535, got '" + n.scalar + "'");
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > 65535) return err(n.line, "port must be a number 1..65535, got '" + n.scalar + "'");
  return static_cast<uint16_t>(v);
}

}  // namespace

Result<std::vector<Endpoint>> parse_endpoints_yaml(std::string_view text) {
  TS_ASSIGN_OR_RETURN(std::vector<Line> lines, split_lines(text));
  BlockParser parser(std::move(lines));
  TS_ASSIGN_OR_RETURN(Node root, parser.parse_document());
  if (root.kind != Node::Kind::kMap) return err(root.line, "the file must be a mapping with an 'endpoints:' list");
  const Node* list = nullptr;
  for (const auto& [k, v] : root.map)
    if (k == "endpoints") list = &v;
  if (!list) return err(1, "no top-level 'endpoints:' key");
  std::vector<Endpoint> out;
  if (list->kind == Node::Kind::kScalar && list->scalar.empty()) return out;  // "endpoints:" alone
  if (list->kind != Node::Kind::kSeq) return err(list->line, "'endpoints' must be a list");
  std::set<std::string> names;
  for (const Node& item : list->seq) {
    if (item.kind != Node::Kind::kMap) return err(item.line, "each endpoint must be a mapping {name, address, port, labels}");
    Endpoint e;
    bool has_port = false;
    for (const auto& [k, v] : item.map) {
      if (k == "labels") {
        if (v.kind == Node::Kind::kScalar && v.scalar.empty()) continue;
        if (v.kind != Node::Kind::kMap) return err(v.line, "labels must be a mapping");
        for (const auto& [lk, lv] : v.map) {
          if (lv.kind != Node::Kind::kScalar) return err(lv.line, "label '" + lk + "' must be a scalar");
          e.labels[lk] = lv.scalar;
        }
        continue;
      }
      if (k != "name" && k != "address" && k != "port") continue;  // other llm-d fields: ignored
      if (v.kind != Node::Kind::kScalar) return err(v.line, "'" + k + "' must be a scalar");
      if (k == "name") e.name = v.scalar;
      if (k == "address") e.address = v.scalar;
      if (k == "port") {
        TS_ASSIGN_OR_RETURN(e.port, parse_port(v));
        has_port = true;
      }
    }
    if (e.address.empty()) return err(item.line, "endpoint without 'address'");
    if (!has_port) return err(item.line, "endpoint without 'port'");
    if (e.name.empty()) e.name = e.address + ":" + std::to_string(e.port);
    if (!names.insert(e.name).second) return err(item.line, "duplicate endpoint name '" + e.name + "'");
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<Endpoint>> load_endpoints_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read endpoints file " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto r = parse_endpoints_yaml(ss.str());
  if (!r.ok()) return invalid_argument(path.string() + ": " + r.status().message());
  return r;
}

EndpointsWatcher::Poll EndpointsWatcher::poll() {
  Poll p;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(path_, ec);
  uintmax_t size = ec ? 0 : std::filesystem::file_size(path_, ec);
  if (ec) {
    if (size_ != 0 || mtime_ != std::filesystem::file_time_type{}) {
      mtime_ = {};
      size_ = 0;
      p.error = not_found("cannot read endpoints file " + path_.string() + " (keeping the last list)");
    }
    return p;
  }
  if (mtime == mtime_ && size == size_) return p;
  mtime_ = mtime;
  size_ = size;
  auto r = load_endpoints_file(path_);
  if (!r.ok()) {
    p.error = r.status();
    return p;
  }
  if (*r != endpoints_) {
    endpoints_ = std::move(r).value();
    p.changed = true;
  }
  return p;
}

}  // namespace ts::router
