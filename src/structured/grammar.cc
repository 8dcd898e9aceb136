#include "structured/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

namespace ts::structured {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// Decodes one UTF-8 character (invalid bytes decode as themselves, Latin-1 style).
uint32_t next_cp(std::string_view s, size_t* i) {
  const auto b = static_cast<unsigned char>(s[*i]);
  int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (n == 0 || *i + n > s.size()) { ++*i; return b; }
  uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[*i + k]);
    if ((c >> 6) != 2) { ++*i; return b; }
    cp = (cp << 6) | (c & 0x3F);
  }
  *i += n;
  return cp;
}

void encode(uint32_t cp, uint8_t* out, int* n) {
  if (cp < 0x80) { out[0] = static_cast<uint8_t>(cp); *n = 1; }
  else if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 0x3F); *n = 2; }
  else if (cp < 0x10000) { out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 0x3F); out[2] = 0x80 | (cp & 0x3F); *n = 3; }
  else { out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 0x3F); out[2] = 0x80 | ((cp >> 6) & 0x3F); out[3] = 0x80 | (cp & 0x3F); *n = 4; }
}

void split_utf8(uint32_t s, uint32_t e, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  if (s > e) return;
  for (uint32_t b : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (s <= b && e > b) { split_utf8(s, b, out); split_utf8(b + 1, e, out); return; }
  }
  if (e <= 0x7F) { out->push_back({{static_cast<uint8_t>(s), static_cast<uint8_t>(e)}}); return; }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((s & ~m) != (e & ~m)) {
      if ((s & m) != 0) { split_utf8(s, s | m, out); split_utf8((s | m) + 1, e, out); return; }
      if ((e & m) != m) { split_utf8(s, (e & ~m) - 1, out); split_utf8(e & ~m, e, out); return; }
    }
  }
  uint8_t a[4], b[4];
  int na = 0, nb = 0;
  encode(s, a, &na);
  encode(e, b, &nb);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < na; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

class Lowerer {
 public:
  Lowerer(const GrammarAst& ast, const CompileLimits& lim) : ast_(ast), lim_(lim) {}

  Result<Grammar> run() {
    for (const auto& [name, node] : ast_.rules) {
      if (ids_.count(name)) return invalid_argument("grammar: rule '" + name + "' is defined twice");
      ids_[name] = new_rule(name);
    }
    auto it = ids_.find(ast_.root);
    if (it == ids_.end()) return invalid_argument("grammar: no '" + ast_.root + "' rule");
    g_.root = it->second;
    for (const auto& [name, node] : ast_.rules) {
      TS_RETURN_IF_ERROR(define(ids_[name], node, name));
    }
    TS_RETURN_IF_ERROR(check_left_recursion());
    return std::move(g_);
  }

 private:
  using Seq = std::vector<Elem>;

  uint32_t new_rule(std::string name) {
    g_.alts.emplace_back();
    g_.names.push_back(std::move(name));
    return static_cast<uint32_t>(g_.alts.size() - 1);
  }

  Status add_alt(uint32_t rule, const Seq& seq) {
    if (static_cast<int64_t>(g_.elems.size() + seq.size() + 1) > lim_.max_grammar_elements) {
      return invalid_argument("grammar too large: more than " + std::to_string(lim_.max_grammar_elements) +
                              " elements after expanding repetitions (limit max_grammar_elements)");
    }
    g_.alts[rule].push_back(static_cast<uint32_t>(g_.elems.size()));
    g_.elems.insert(g_.elems.end(), seq.begin(), seq.end());
    g_.elems.push_back(Elem{ElemKind::kEnd, 0});
    return Status();
  }

  Status define(uint32_t rule, const Node& n, const std::string& ctx) {
    if (n.kind == Node::Kind::kAlt) {
      for (const Node& k : n.kids) {
        Seq s;
        TS_RETURN_IF_ERROR(emit(k, &s, ctx));
        TS_RETURN_IF_ERROR(add_alt(rule, s));
      }
      return Status();
    }
    Seq s;
    TS_RETURN_IF_ERROR(emit(n, &s, ctx));
    return add_alt(rule, s);
  }

  uint32_t set_index(const ByteSet& b) {
    auto it = set_ids_.find(b);
    if (it != set_ids_.end()) return it->second;
    g_.sets.push_back(b);
    return set_ids_[b] = static_cast<uint32_t>(g_.sets.size() - 1);
  }

  static ByteSet byte_range(uint8_t lo, uint8_t hi) {
    ByteSet s{0, 0, 0, 0};
    for (unsigned b = lo; b <= hi; ++b) s[b >> 6] |= uint64_t{1} << (b & 63);
    return s;
  }

  Status emit_class(const Node& n, Seq* out, const std::string& ctx) {
    auto cached = class_rules_.find(n.ranges);
    if (cached != class_rules_.end()) { out->push_back(cached->second); return Status(); }
    ByteSet single{0, 0, 0, 0};
    bool any_single = false;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> multi;
    for (const auto& [lo, hi] : n.ranges) {
      std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
      split_utf8(lo, hi, &seqs);
      for (auto& sq : seqs) {
        if (sq.size() == 1) {
          ByteSet r = byte_range(sq[0].first, sq[0].second);
          for (int w = 0; w < 4; ++w) single[w] |= r[w];
          any_single = true;
        } else {
          multi.push_back(std::move(sq));
        }
      }
    }
    Elem result;
    if (multi.empty()) {
      if (!any_single) return invalid_argument("grammar: empty character class in rule '" + ctx + "'");
      result = Elem{ElemKind::kBytes, set_index(single)};
    } else {
      const uint32_t r = new_rule(ctx + "-char");
      if (any_single) TS_RETURN_IF_ERROR(add_alt(r, Seq{Elem{ElemKind::kBytes, set_index(single)}}));
      for (const auto& sq : multi) {
        Seq s;
        for (const auto& [lo, hi] : sq) s.push_back(Elem{ElemKind::kBytes, set_index(byte_range(lo, hi))});
        TS_RETURN_IF_ERROR(add_alt(r, s));
      }
      result = Elem{ElemKind::kRule, r};
    }
    class_rules_[n.ranges] = result;
    out->push_back(result);
    return Status();
  }

  // One element standing for the whole node (a rule when it is not a single terminal/reference).
  Result<Elem> atom(const Node& n, const std::string& ctx) {
    Seq s;
    if (n.kind == Node::Kind::kAlt && n.kids.size() > 1) {
      const uint32_t r = new_rule(ctx + "-alt");
      TS_RETURN_IF_ERROR(define(r, n, ctx));
      return Elem{ElemKind::kRule, r};
    }
    TS_RETURN_IF_ERROR(emit(n, &s, ctx));
    if (s.size() == 1) return s[0];
    const uint32_t r = new_rule(ctx + "-grp");
    TS_RETURN_IF_ERROR(add_alt(r, s));
    return Elem{ElemKind::kRule, r};
  }

  Status emit(const Node& n, Seq* out, const std::string& ctx) {
    if (static_cast<int64_t>(g_.elems.size() + out->size()) > lim_.max_grammar_elements) {
      return invalid_argument("grammar too large: more than " + std::to_string(lim_.max_grammar_elements) +
                              " elements after expanding repetitions (limit max_grammar_elements)");
    }
    switch (n.kind) {
      case Node::Kind::kSeq:
        for (const Node& k : n.kids) TS_RETURN_IF_ERROR(emit(k, out, ctx));
        return Status();
      case Node::Kind::kAlt: {
        if (n.kids.size() == 1) return emit(n.kids[0], out, ctx);
        TS_ASSIGN_OR_RETURN(Elem e, atom(n, ctx));
        out->push_back(e);
        return Status();
      }
      case Node::Kind::kClass: return emit_class(n, out, ctx);
      case Node::Kind::kRef: {
        auto it = ids_.find(n.ref);
        if (it == ids_.end()) return invalid_argument("grammar: rule '" + n.ref + "' is not defined (used in '" + ctx + "')");
        out->push_back(Elem{ElemKind::kRule, it->second});
        return Status();
      }
      case Node::Kind::kRepeat: {
        if (n.max >= 0 && n.max < n.min) return invalid_argument("grammar: repetition {" + std::to_string(n.min) + "," + std::to_string(n.max) + "} has max < min");
        if (n.min > lim_.max_repeat || n.max > lim_.max_repeat) {
          return invalid_argument("grammar: repetition bound above the limit of " + std::to_string(lim_.max_repeat));
        }
        TS_ASSIGN_OR_RETURN(Elem x, atom(n.kids.at(0), ctx));
        for (int32_t i = 0; i < n.min; ++i) out->push_back(x);
        if (n.max < 0) {
          const uint32_t r = new_rule(ctx + "-star");
          TS_RETURN_IF_ERROR(add_alt(r, Seq{x, Elem{ElemKind::kRule, r}}));
          TS_RETURN_IF_ERROR(add_alt(r, Seq{}));
          out->push_back(Elem{ElemKind::kRule, r});
        } else if (n.max > n.min) {
          uint32_t prev = new_rule(ctx + "-opt");
          TS_RETURN_IF_ERROR(add_alt(prev, Seq{x}));
          TS_RETURN_IF_ERROR(add_alt(prev, Seq{}));
          for (int32_t k = 1; k < n.max - n.min; ++k) {
            const uint32_t r = new_rule(ctx + "-opt");
            TS_RETURN_IF_ERROR(add_alt(r, Seq{x, Elem{ElemKind::kRule, prev}}));
            TS_RETURN_IF_ERROR(add_alt(r, Seq{}));
            prev = r;
          }
          out->push_back(Elem{ElemKind::kRule, prev});
        }
        return Status();
      }
    }
    return Status();
  }

  Status check_left_recursion() {
    const size_t R = g_.alts.size();
    std::vector<char> nullable(R, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < R; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g_.alts[r]) {
          bool all = true;
          for (uint32_t p = a; g_.elems[p].kind != ElemKind::kEnd; ++p) {
            const Elem& e = g_.elems[p];
            if (e.kind == ElemKind::kBytes || !nullable[e.arg]) { all = false; break; }
          }
          if (all) { nullable[r] = 1; changed = true; break; }
        }
      }
    }
    // Edges r -> rules that can come first in r.
    std::vector<std::vector<uint32_t>> first(R);
    for (size_t r = 0; r < R; ++r) {
      for (uint32_t a : g_.alts[r]) {
        for (uint32_t p = a; g_.elems[p].kind == ElemKind::kRule; ++p) {
          first[r].push_back(g_.elems[p].arg);
          if (!nullable[g_.elems[p].arg]) break;
        }
      }
    }
    std::vector<uint8_t> color(R, 0);  // 0 new, 1 on the DFS path, 2 done
    for (size_t start = 0; start < R; ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, size_t>> st{{static_cast<uint32_t>(start), 0}};
      color[start] = 1;
      while (!st.empty()) {
        auto& [r, i] = st.back();
        if (i < first[r].size()) {
          const uint32_t nx = first[r][i++];
          if (color[nx] == 1) return invalid_argument("grammar: left recursion in rule '" + g_.names[nx] + "' (not supported; rewrite it right-recursively)");
          if (color[nx] == 0) { color[nx] = 1; st.push_back({nx, 0}); }
        } else {
          color[r] = 2;
          st.pop_back();
        }
      }
    }
    return Status();
  }

  const GrammarAst& ast_;
  const CompileLimits& lim_;
  Grammar g_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::map<ByteSet, uint32_t> set_ids_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, Elem> class_rules_;
};

}  // namespace

Node Node::literal(std::string_view utf8) {
  Node n = seq();
  for (size_t i = 0; i < utf8.size();) n.kids.push_back(chr(next_cp(utf8, &i)));
  return n;
}

std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> r,
                                                            bool negate) {
  // Surrogates are not characters: drop them.
  std::vector<std::pair<uint32_t, uint32_t>> v;
  for (auto [lo, hi] : r) {
    if (lo > hi) std::swap(lo, hi);
    hi = std::min(hi, kMaxCp);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      v.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) v.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) v.emplace_back(0xE000, hi);
    } else {
      v.emplace_back(lo, hi);
    }
  }
  std::sort(v.begin(), v.end());
  std::vector<std::pair<uint32_t, uint32_t>> m;
  for (const auto& p : v) {
    if (!m.empty() && p.first <= m.back().second + 1) m.back().second = std::max(m.back().second, p.second);
    else m.push_back(p);
  }
  if (!negate) return m;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : m) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return normalize_ranges(std::move(out), false);
}

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  split_utf8(lo, hi, &out);
  return out;
}

Result<Grammar> lower(const GrammarAst& ast, const CompileLimits& limits) {
  Lowerer l(ast, limits);
  return l.run();
}

}  // namespace ts::structured
