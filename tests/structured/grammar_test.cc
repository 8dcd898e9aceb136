// Grammar front ends (GBNF, regex), lowering and the byte-level matcher, without a tokenizer:
// a TokenIndex is not needed to run bytes through a Runtime.
#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace ts::structured {
namespace {

// Runs whole strings through a grammar's automaton.
class Matcher {
 public:
  explicit Matcher(Grammar g) : g_(std::move(g)), rt_(g_, nullptr) {}
  // Full match: all bytes accepted and the end is a complete sentence.
  bool full(std::string_view s) {
    const int32_t st = rt_.run(rt_.initial(), s);
    return st != Runtime::kDead && rt_.accepting(st);
  }
  // Prefix: every byte accepted (the sentence may be incomplete).
  bool prefix(std::string_view s) { return rt_.run(rt_.initial(), s) != Runtime::kDead; }
  Runtime& rt() { return rt_; }

 private:
  Grammar g_;
  Runtime rt_;
};

Grammar gbnf(std::string_view text) {
  auto ast = parse_gbnf(text, {});
  EXPECT_TRUE(ast.ok()) << ast.status().to_string();
  auto g = lower(*ast, {});
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

Grammar regex(std::string_view text) {
  auto n = parse_regex(text, {});
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  GrammarAst ast;
  ast.rules.emplace_back("root", std::move(n).value());
  auto g = lower(ast, {});
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return std::move(g).value();
}

TEST(Utf8Sequences, CoverExactlyTheRange) {
  // Every code point of a range spanning all encoded lengths is matched by exactly one sequence,
  // and no code point outside it is.
  const uint32_t lo = 0x70, hi = 0x10400;
  auto seqs = utf8_sequences(lo, hi);
  auto enc = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { s += static_cast<char>(0xE0 | (cp >> 12)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    else { s += static_cast<char>(0xF0 | (cp >> 18)); s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F)); s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    return s;
  };
  for (uint32_t cp = 0x20; cp < 0x10500; cp += (cp < 0x900 ? 1 : 37)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const std::string e = enc(cp);
    int hits = 0;
    for (const auto& sq : seqs) {
      if (sq.size() != e.size()) continue;
      bool ok = true;
      for (size_t i = 0; i < e.size(); ++i) {
        const auto b = static_cast<uint8_t>(e[i]);
        ok = ok && b >= sq[i].first && b <= sq[i].second;
      }
      hits += ok;
    }
    EXPECT_EQ(hits, (cp >= lo && cp <= hi) ? 1 : 0) << std::hex << cp;
  }
}

TEST(Gbnf, LiteralsClassesRepetitionAndAlternatives) {
  Matcher m(gbnf(R"(
# a comment
root ::= greeting " " name ("!" | "?")?
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]{1,3}
)"));
  EXPECT_TRUE(m.full("hi Bob"));
  EXPECT_TRUE(m.full("hello Anna!"));
  EXPECT_TRUE(m.full("hi Al?"));
  EXPECT_FALSE(m.full("hi B"));       // too short
  EXPECT_FALSE(m.full("hi Bobby"));   // {1,3}
  EXPECT_FALSE(m.full("hey Bob"));
  EXPECT_TRUE(m.prefix("hel"));
  EXPECT_FALSE(m.full("hel"));
}

TEST(Gbnf, UnicodeClassesAndNegationMatchUtf8Bytes) {
  Matcher m(gbnf(R"(root ::= [^a-z"]+ "é" [α-ω]*)"));
  EXPECT_TRUE(m.full("ÀB€😀é"));
  EXPECT_TRUE(m.full("Xéαβγ"));
  EXPECT_FALSE(m.full("aé"));
  EXPECT_FALSE(m.full("X\"é"));
  EXPECT_FALSE(m.full("Xéa"));
  // A character split into bytes: every prefix of a valid multi-byte character is accepted.
  EXPECT_TRUE(m.prefix("X\xC3"));
  EXPECT_FALSE(m.prefix("X\xC3\x28"));  // not a continuation byte
}

TEST(Gbnf, RecursionWithoutStackGrowthAndNesting) {
  Matcher m(gbnf(R"(
root ::= list
list ::= "[" (item ("," item)*)? "]"
item ::= [0-9]+ | list
)"));
  EXPECT_TRUE(m.full("[]"));
  EXPECT_TRUE(m.full("[1,[2,[3,[]]],45]"));
  EXPECT_FALSE(m.full("[1,]"));
  EXPECT_FALSE(m.full("[[1]"));
  // Long right-recursive repetition: the number of automaton states stays small.
  std::string s = "[";
  for (int i = 0; i < 2000; ++i) s += "1,";
  s += "2]";
  EXPECT_TRUE(m.full(s));
  EXPECT_LT(m.rt().num_states(), 64u);
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto bad = [](std::string_view text, CompileLimits lim = {}) {
    auto ast = parse_gbnf(text, lim);
    if (!ast.ok()) return ast.status().message();
    auto g = lower(*ast, lim);
    return g.ok() ? std::string() : g.status().message();
  };
  EXPECT_NE(bad("root ::= \"a").find("unterminated string"), std::string::npos);
  EXPECT_NE(bad("root ::= [a-").find("unterminated character class"), std::string::npos);
  EXPECT_NE(bad("root ::= foo").find("'foo' is not defined"), std::string::npos);
  EXPECT_NE(bad("start ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(bad("root ::= root \"a\" | \"b\"").find("left recursion"), std::string::npos);
  EXPECT_NE(bad("root ::= x\nx ::= \"\"? root").find("left recursion"), std::string::npos);
  EXPECT_NE(bad("root ::= \"a\" ::= ").find("line 1"), std::string::npos);
  EXPECT_NE(bad("root ::= \"a\"{3,2}").find("n < m"), std::string::npos);
  EXPECT_NE(bad("root ::= \"a\"{99999}").find("limit"), std::string::npos);
  // Compile cost is bounded: lowering is linear in the expanded size, which has a limit.
  EXPECT_NE(bad("root ::= (\"ab\" [a-z]){0,900} \"c\"{0,900}", CompileLimits{.max_grammar_elements = 1000})
                .find("too large"), std::string::npos);
  EXPECT_EQ(bad("root ::= ((((\"ab\"){0,9000}){0,9000}){0,9000})"), "");  // nested atoms stay linear
  EXPECT_EQ(bad("root ::= \"ok\""), "");
}

TEST(Regex, FullMatchSemantics) {
  Matcher m(regex(R"(^\d{3}-[A-Z]{2}(x|yz)*\.?$)"));
  EXPECT_TRUE(m.full("123-AB"));
  EXPECT_TRUE(m.full("123-ABxyzx."));
  EXPECT_FALSE(m.full("12-AB"));
  EXPECT_FALSE(m.full("123-ABy"));
  EXPECT_FALSE(m.full("123-AB.."));
  Matcher w(regex(R"((?:\w+\s?)+|[^\d\s]{2}|.)"));
  EXPECT_TRUE(w.full("hello world"));
  EXPECT_TRUE(w.full("ß€"));
  EXPECT_TRUE(w.full("\xF0\x9F\x98\x80"));  // one character of `.`
  EXPECT_FALSE(w.full("\n"));
}

TEST(Regex, UnsupportedConstructsAreRefused) {
  for (const char* p : {"(a)\\1", "(?=a)", "a\\b", "[[:alpha:]]", "a{2,1}", "*a", "(a", "a)", "[b-a]", "a^b"}) {
    auto n = parse_regex(p, {});
    EXPECT_FALSE(n.ok()) << p;
    if (!n.ok()) { EXPECT_EQ(n.status().message().rfind("regex: ", 0), 0u) << n.status().message(); }
  }
}

}  // namespace
}  // namespace ts::structured
