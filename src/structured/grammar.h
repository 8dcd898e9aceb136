// Grammars for constrained decoding: an AST (what the GBNF and regex parsers produce) and its
// lowering to a byte-level grammar (every terminal is a set of bytes; Unicode character classes
// become UTF-8 byte sequences), which the matcher (matcher.h) runs as a pushdown automaton.
//
// Lowering desugars groups, alternations inside sequences and repetitions into generated rules
// (x* -> R ::= x R | ""; x{m,n} -> m copies then n-m nested optionals). It refuses, with
// kInvalidArgument: undefined rules, left recursion (the matcher expands rules top-down), and
// grammars larger than CompileLimits::max_grammar_elements.
// Pure functions; the results are immutable and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "structured/constraint.h"

namespace ts::structured {

// ---- AST ----
struct Node {
  enum class Kind { kSeq, kAlt, kClass, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<Node> kids;                            // kSeq, kAlt: items; kRepeat: exactly one
  std::vector<std::pair<uint32_t, uint32_t>> ranges; // kClass: code point ranges (inclusive)
  std::string ref;                                   // kRef: rule name
  int32_t min = 0, max = -1;                         // kRepeat: bounds, max -1 = unbounded

  static Node seq(std::vector<Node> k = {}) { Node n; n.kind = Kind::kSeq; n.kids = std::move(k); return n; }
  static Node alt(std::vector<Node> k) { Node n; n.kind = Kind::kAlt; n.kids = std::move(k); return n; }
  static Node cls(std::vector<std::pair<uint32_t, uint32_t>> r) { Node n; n.kind = Kind::kClass; n.ranges = std::move(r); return n; }
  static Node chr(uint32_t c) { return cls({{c, c}}); }
  static Node rule(std::string name) { Node n; n.kind = Kind::kRef; n.ref = std::move(name); return n; }
  static Node repeat(Node x, int32_t lo, int32_t hi) {
    Node n; n.kind = Kind::kRepeat; n.kids.push_back(std::move(x)); n.min = lo; n.max = hi; return n;
  }
  static Node literal(std::string_view utf8);        // a sequence of single characters
};

struct GrammarAst {
  std::vector<std::pair<std::string, Node>> rules;   // definition order; names unique
  std::string root = "root";
};

// Code point ranges: sorted, merged; `negate` complements over [0, 0x10FFFF] (surrogates excluded).
std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> r,
                                                            bool negate);

// GBNF (llama.cpp grammar syntax): rules `name ::= alternatives`, "literals" with \n \t \r \\ \"
// \xHH \uHHHH \UHHHHHHHH escapes, [classes] with ranges and ^, `.`, (groups), postfix * + ?
// {m} {m,} {m,n}, # comments. Errors: kInvalidArgument "grammar: line L col C: ...".
Result<GrammarAst> parse_gbnf(std::string_view text, const CompileLimits& limits);

// A regular expression (the subset used for structured output: literals, ., [classes], \d \w \s
// \D \W \S, escapes, (groups), (?:...), |, * + ? {m} {m,} {m,n} (lazy ? ignored), ^ and $ at the
// ends). The whole text must match. Back-references, look-around and other anchors are refused.
Result<Node> parse_regex(std::string_view pattern, const CompileLimits& limits);

// ---- Lowered byte-level grammar ----
enum class ElemKind : uint8_t { kBytes, kRule, kEnd };
struct Elem {
  ElemKind kind = ElemKind::kEnd;
  uint32_t arg = 0;  // kBytes: index into sets; kRule: rule id
};

using ByteSet = std::array<uint64_t, 4>;
inline bool byteset_has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }

class Grammar {
 public:
  std::vector<Elem> elems;                      // alternatives, each ended by kEnd
  std::vector<std::vector<uint32_t>> alts;      // [rule] -> start positions in elems
  std::vector<std::string> names;               // [rule]
  std::vector<ByteSet> sets;                    // terminal byte sets
  uint32_t root = 0;
};

Result<Grammar> lower(const GrammarAst& ast, const CompileLimits& limits);

// UTF-8 encoding of the code point range [lo, hi] as sequences of byte ranges (each sequence
// matches a contiguous part of the range; together they match exactly the range). Exposed for tests.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace ts::structured
