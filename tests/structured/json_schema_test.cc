// JSON Schema -> grammar, keyword by keyword: each schema accepts the JSON texts it should and
// refuses the ones it should not (run byte by byte through the compiled automaton), and
// unsupported keywords are refused by name.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "schema_check.h"

namespace ts::structured {
namespace {

using test::SchemaMatcher;

struct Case {
  const char* schema;
  std::vector<std::string> good;
  std::vector<std::string> bad;
};

void check(const Case& c) {
  SchemaMatcher m(c.schema);
  ASSERT_EQ(m.error(), "") << c.schema;
  const auto root = test::ojson::parse(c.schema);
  for (const auto& g : c.good) {
    EXPECT_TRUE(m.accepts(g)) << c.schema << "\n  should accept: " << g;
    // The independent validator agrees (the fixture itself is right).
    EXPECT_EQ(test::validate(test::ojson::parse(g), root, root), "") << g;
  }
  for (const auto& b : c.bad) EXPECT_FALSE(m.accepts(b)) << c.schema << "\n  should refuse: " << b;
}

TEST(JsonSchema, Types) {
  check({R"({"type":"string"})", {R"("")", R"("a b")", R"("\"\\\n\u00e9")", "\"日本\""}, {R"(")", "\"a\nb\"", "1", R"("\q")"}});
  check({R"({"type":"integer"})", {"0", "-7", "1234567890"}, {"01", "1.5", "-", "\"1\"", "1e3"}});
  check({R"({"type":"number"})", {"0", "-0.5", "3.25e-3", "10E+2"}, {".5", "1.", "01", "--1", "1e"}});
  check({R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}});
  check({R"({"type":"null"})", {"null"}, {"nul", "\"null\""}});
  check({R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"}});
}

TEST(JsonSchema, EnumAndConst) {
  check({R"({"enum":["red","grün",3,null,{"a":1}]})", {R"("red")", "\"grün\"", "3", "null", R"({"a":1})"},
         {R"("blue")", "4", R"({"a":2})"}});
  check({R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}});
}

TEST(JsonSchema, ObjectsRequiredOptionalAndAdditional) {
  const char* s = R"({"type":"object","properties":{
      "name":{"type":"string"},"age":{"type":"integer"},"nick":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},
      "required":["name","age"],"additionalProperties":false})";
  check({s,
         {R"({"name":"a","age":1})", R"({"name":"a","age":1,"nick":"b"})", R"({"name":"a","age":1,"tags":[]})",
          R"({"name":"a","age":1,"nick":"b","tags":["x"]})", "{ \"name\" : \"a\" ,\n \"age\" : 1 }"},
         {R"({"name":"a"})", R"({"age":1,"name":"a"})" /* required first */, R"({"name":"a","age":1,"x":1})",
          R"({"name":"a","age":1,})", R"({"name":"a","age":"1"})", R"({})"}});
  // Nested objects and optional-only objects.
  check({R"({"type":"object","properties":{"p":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}}}}})",
         {R"({})", R"({"p":{}})", R"({"p":{"x":1}})", R"({"p":{"y":2}})", R"({"p":{"x":1,"y":2}})"},
         {R"({"p":{"x":1,}})", R"({"p":{,"y":2}})", R"({"q":1})"}});
  // additionalProperties as a schema and as true.
  check({R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"boolean"}})",
         {R"({"id":1})", R"({"id":1,"x":true,"y":false})"}, {R"({"id":1,"x":1})"}});
  check({R"({"type":"object","additionalProperties":true})", {R"({})", R"({"a":[1,{"b":null}]})"}, {R"([])"}});
}

TEST(JsonSchema, ArraysMinMaxItemsAndTuples) {
  check({R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
         {"[1,2]", "[1, 2, 3]"}, {"[]", "[1]", "[1,2,3,4]", "[1,\"2\"]"}});
  check({R"({"type":"array","items":{"type":"boolean"},"maxItems":1})", {"[]", "[true]"}, {"[true,false]"}});
  check({R"({"type":"array","items":{"type":"null"}})", {"[]", "[null,null,null]"}, {"[null,]"}});
  check({R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
         {R"([])", R"(["a"])", R"(["a",1])"}, {R"([1])", R"(["a",1,2])"}});
}

TEST(JsonSchema, AnyOfOneOfAndRefs) {
  check({R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"k":{"const":1}},"required":["k"]}]})",
         {"5", R"({"k":1})"}, {R"({"k":2})", R"("s")"}});
  check({R"({"oneOf":[{"type":"string","maxLength":2},{"type":"boolean"}]})", {R"("ab")", "true"}, {R"("abc")"}});
  // oneOf with disjoint branches: literals, and objects told apart by a required const ("kind").
  check({R"({"oneOf":[{"const":"a"},{"enum":["b",true]},{"type":"integer","minimum":5}]})", {R"("a")", R"("b")", "true", "7"},
         {R"("c")", "3", "false"}});
  check({R"({"$defs":{"cat":{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind","lives"]}},
            "oneOf":[{"$ref":"#/$defs/cat"},
                     {"type":"object","properties":{"kind":{"const":"dog"},"bark":{"type":"boolean"}},"required":["kind","bark"]}]})",
         {R"({"kind":"cat","lives":9})", R"({"kind":"dog","bark":true})"}, {R"({"kind":"cat","bark":true})", R"({"kind":"cow","lives":1})"}});
  // Branches that can overlap are refused naming oneOf (exclusivity is not enforceable).
  for (const char* s : {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
                        R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]})",
                        R"({"oneOf":[{"enum":[1,2]},{"type":"integer","minimum":5}]})",  // conservative: ranges not compared
                        R"({"oneOf":[{"const":1},{"enum":[3,1.0]}]})",
                        R"({"oneOf":[{},{"type":"null"}]})",
                        R"({"oneOf":[{"type":"object","properties":{"k":{"const":1}}},{"type":"object","properties":{"k":{"const":2}}}]})"}) {
    SchemaMatcher m(s);
    EXPECT_NE(m.error().find("'oneOf'"), std::string::npos) << s << ": " << m.error();
  }
  // Local $ref into $defs / definitions, and recursion through "#".
  check({R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},
            "type":"array","items":{"$ref":"#/$defs/pt"}})",
         {R"([{"x":1},{"x":2}])"}, {R"([{"y":1}])"}});
  check({R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"]})",
         {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"}, {R"({"v":1,"kids":[{}]})"}});
  check({R"({"definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s"})", {R"("x")"}, {"1"}});
}

TEST(JsonSchema, StringPatternLengthAndFormats) {
  check({R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"}, {R"("AB-12")", R"("ab-123")"}});
  check({R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", "\"日本語\""}, {R"("a")", R"("abcd")"}});
  check({R"({"type":"string","format":"date"})", {R"("2024-02-29")"}, {R"("2024-13-01")", R"("2024-1-01")"}});
  check({R"({"type":"string","format":"time"})", {R"("23:59:59Z")", R"("08:30:00.123+02:00")"}, {R"("24:00:00Z")", R"("08:30Z")"}});
  check({R"({"type":"string","format":"date-time"})", {R"("2024-05-01T12:00:00Z")"}, {R"("2024-05-01 12:00:00Z")"}});
  check({R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567-e89b-12d3-a456")"}});
  check({R"({"type":"string","format":"email"})", {R"("a.b+c@example.co.uk")"}, {R"("@x.org")", R"("a@b")", R"("a@-b.org")"}});
  check({R"({"type":"string","format":"ipv4"})", {R"("192.168.0.255")"}, {R"("256.1.1.1")", R"("1.2.3")"}});
}

TEST(JsonSchema, IntegerRangesAreExact) {
  // Every integer in [-1100, 1100] is accepted exactly when it lies in the range.
  struct R { const char* schema; int64_t lo, hi; };
  const R ranges[] = {
      {R"({"type":"integer","minimum":0,"maximum":120})", 0, 120},
      {R"({"type":"integer","minimum":-37,"maximum":915})", -37, 915},
      {R"({"type":"integer","minimum":-1000,"maximum":-99})", -1000, -99},
      {R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":1001})", 6, 1000},
      {R"({"type":"integer","minimum":17})", 17, INT64_MAX},
      {R"({"type":"integer","minimum":-250})", -250, INT64_MAX},
      {R"({"type":"integer","maximum":42})", INT64_MIN, 42},
      {R"({"type":"integer","maximum":-8})", INT64_MIN, -8},
      {R"({"type":"integer","minimum":1.5,"maximum":9.5})", 2, 9},
  };
  for (const R& r : ranges) {
    SchemaMatcher m(r.schema);
    ASSERT_EQ(m.error(), "") << r.schema;
    for (int64_t v = -1100; v <= 1100; ++v) {
      EXPECT_EQ(m.accepts(std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " value " << v;
    }
    EXPECT_FALSE(m.accepts("-0"));
    EXPECT_FALSE(m.accepts("007"));
  }
  SchemaMatcher empty(R"({"type":"integer","minimum":5,"maximum":4})");
  EXPECT_NE(empty.error().find("empty"), std::string::npos);
}

TEST(JsonSchema, NumberRangesAreSoundAndExactOnSignAndIntegerPart) {
  // Every decimal v = k/4 for k in [-48, 48] and every integer part: never accepted outside the
  // range; accepted inside it whenever v is an integer or its unit interval lies in the range.
  struct R { const char* schema; double lo, hi; bool lo_ex, hi_ex; };
  const double inf = std::numeric_limits<double>::infinity();
  const R ranges[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", 0, 1, false, false},
      {R"({"type":"number","minimum":-2.5,"maximum":7.25})", -2.5, 7.25, false, false},
      {R"({"type":"number","exclusiveMinimum":-3,"exclusiveMaximum":3})", -3, 3, true, true},
      {R"({"type":"number","minimum":1.5})", 1.5, inf, false, false},
      {R"({"type":"number","maximum":-0.5})", -inf, -0.5, false, false},
      {R"({"type":"number","exclusiveMinimum":0})", 0, inf, true, false},
      {R"({"type":"number","minimum":-9.75,"maximum":-4})", -9.75, -4, false, false},
  };
  for (const R& r : ranges) {
    SchemaMatcher m(r.schema);
    ASSERT_EQ(m.error(), "") << r.schema;
    auto in = [&](double v) { return (r.lo_ex ? v > r.lo : v >= r.lo) && (r.hi_ex ? v < r.hi : v <= r.hi); };
    for (int k = -48; k <= 48; ++k) {
      const double v = k / 4.0;
      std::string text = std::to_string(v);  // "-2.250000"
      text.erase(text.find_last_not_of('0') + 1);
      if (text.back() == '.') text.pop_back();
      if (text == "-0") continue;
      const double ip = std::trunc(v);
      const bool whole_unit = v >= 0 ? in(ip) && ip + 1 <= r.hi : ip - 1 >= r.lo && (r.hi_ex ? ip < r.hi : ip <= r.hi);
      const bool must = in(v) && (v == ip || whole_unit);
      EXPECT_EQ(m.accepts(text), must) << r.schema << " value " << text;
      if (!in(v)) {
        EXPECT_FALSE(m.accepts(text)) << r.schema << " out of range: " << text;
      }
    }
    EXPECT_FALSE(m.accepts("1e2"));  // bounded numbers are plain decimals
  }
  SchemaMatcher narrow(R"({"type":"number","minimum":0.2,"maximum":0.3})");
  EXPECT_NE(narrow.error().find("minimum"), std::string::npos) << narrow.error();
  SchemaMatcher empty(R"({"type":"number","minimum":2,"exclusiveMaximum":2})");
  EXPECT_NE(empty.error().find("empty"), std::string::npos) << empty.error();
  SchemaMatcher free(R"({"type":"number"})");
  EXPECT_TRUE(free.accepts("-1.5e3"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"not":{"type":"string"}})", "'not'"},
      {R"({"type":"object","patternProperties":{"^a":{}}})", "'patternProperties'"},
      {R"({"type":"object","minProperties":1})", "'minProperties'"},
      {R"({"if":{},"then":{}})", "'if'"},
      {R"({"type":"string","format":"uri"})", "format 'uri'"},
      {R"({"allOf":[{"type":"string"},{"minLength":1}]})", "'allOf'"},
      {R"({"type":"integer","multipleOf":3})", "'multipleOf'"},
      {R"({"type":"strange"})", "type 'strange'"},
      {R"({"$ref":"http://example.com/s.json"})", "not a local reference"},
      {R"({"$ref":"#/$defs/missing"})", "does not resolve"},
      {R"({"type":"object","properties":{},"required":["x"]})", "'x'"},
      {R"j({"type":"string","pattern":"(?=x)"})j", "'pattern'"},
      {R"({"type":"string","pattern":"a\"b"})", "escape"},
      {R"(not json)", "not valid JSON"},
      {R"({"type":"string","maxLength":100000})", "limit"},
  };
  for (const auto& [schema, needle] : cases) {
    auto g = schema_to_gbnf(schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << schema << " -> " << g.status().message();
  }
  // Annotations are accepted and ignored.
  EXPECT_TRUE(schema_to_gbnf(R"({"title":"T","description":"d","$schema":"x","type":"string","default":"a"})").ok());
}

TEST(JsonSchema, RulePrefixKeepsNamesApart) {
  auto g = schema_to_gbnf(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})", "tool-1-");
  ASSERT_TRUE(g.ok());
  // Composable: another grammar embeds the value through tool-1-root.
  auto ast = parse_gbnf("root ::= \"<call>\" tool-1-root \"</call>\"\n" + *g, {});
  ASSERT_TRUE(ast.ok()) << ast.status().message();
  auto low = lower(*ast, {});
  ASSERT_TRUE(low.ok());
  Runtime rt(*low, nullptr);
  auto full = [&](std::string_view s) { int32_t st = rt.run(rt.initial(), s); return st >= 0 && rt.accepting(st); };
  EXPECT_TRUE(full(R"(<call>{"a":5}</call>)"));
  EXPECT_FALSE(full(R"(<call>{"a":"5"}</call>)"));
  EXPECT_FALSE(schema_to_gbnf("{}", "bad prefix").ok());
}

}  // namespace
}  // namespace ts::structured
