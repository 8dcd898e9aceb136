// Interpreter behaviour against jinja2: each row is a template, its context and the exact text
// Python jinja2 3.1 renders under transformers' settings (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson). Rows cover scoping, loops,
// macros, call/filter blocks, whitespace control, slicing, arithmetic, tests, filters and
// Python str()/repr() formatting of values.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace ts::chat {
namespace {

using ojson = nlohmann::ordered_json;

struct Row {
  const char* source;
  const char* context;
  const char* expected;
};

const Row kRows[] = {
    {"{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
     "{}",
     "1110"},
    {"{{ [1,2,3][::-1] }}|{{ 'héllo'[1:3] }}|{{ 'abc'[-1] }}|{{ [1,2,3,4,5][1::2] }}|{{ 'abcdef'[::-2] }}",
     "{}",
     "[3, 2, 1]|él|c|[2, 4]|fdb"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 10 / 5 }}",
     "{}",
     "3 -4 1 2 3.5 1024 2.5 2.0"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' * 3 }} {{ [1] + [2] }}",
     "{}",
     "a1NoneTrue xxx [1, 2]"},
    {"{{ x is defined }} {{ y is none }} {{ 3 is odd }} {{ 4 is even }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} {{ true is boolean }} {{ x is not defined }}",
     "{\"y\": null}",
     "False True True True True True True True True True"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "b=1;a=2;ba"},
    {"{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% else %}none{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "1/2,2/2"},
    {"{% for x in [] %}a{% else %}empty{% endfor %}",
     "{}",
     "empty"},
    {"{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}",
     "03Trueb|12Falseac|21Falseb|"},
    {"{{ '  hi  ' | trim }}|{{ 'Hello World' | lower }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}|{{ 'a-b' | replace('-', '+') }}",
     "{}",
     "hi|hello world|Hello World|Hello|a+b"},
    {"{{ [3,1,2] | sort }} {{ ['b','A','c'] | sort }} {{ [3,1,2] | sort(reverse=true) | join(',') }} {{ [1,2,2,3] | unique | list }}",
     "{}",
     "[1, 2, 3] ['A', 'b', 'c'] 3,2,1 [1, 2, 3]"},
    {"{{ {'b': 1, 'a': 2} | dictsort }} {{ xs | map(attribute='n') | join(',') }} {{ xs | selectattr('n', 'gt', 1) | list | length }}",
     "{\"xs\": [{\"n\": 1}, {\"n\": 2}, {\"n\": 3}]}",
     "[('a', 2), ('b', 1)] 1,2,3 2"},
    {"{{ xs | first }} {{ xs | last }} {{ xs | length }} {{ xs | sum }} {{ xs | max }} {{ xs | min }} {{ 'abc' | list }} {{ 'a b  c' | wordcount }}",
     "{\"xs\": [4, 5, 6]}",
     "4 6 3 15 6 4 ['a', 'b', 'c'] 3"},
    {"{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}",
     "{\"d\": {\"a\": [1, 2, {\"b\": null}], \"c\": true, \"e\": {}}}",
     "{\"a\": [1, 2, {\"b\": null}], \"c\": true, \"e\": {}}|{\n  \"a\": [\n    1,\n    2,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": true,\n  \"e\": {}\n}|\"é\\\"\\n\"|\"\\u00e9\"|[]|1.0"},
    {"{{ undefined_var }}|{{ undefined_var | default('d') }}|{{ '' | default('e', true) }}|{{ none }}|{{ true }}|{{ 1.50 }}|{{ 1e20 }}|{{ 0.0001 }}|{{ 1e-5 }}",
     "{}",
     "|d|e|None|True|1.5|1e+20|0.0001|1e-05"},
    {"{% set ns = namespace(a=1, b='x') %}{% for i in range(3) %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}{{ ns.b }}",
     "{}",
     "4x"},
    {"{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}",
     "{}",
     "Hello A! Hello B? Hello C!"},
    {"{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}",
     "{}",
     "[inner]"},
    {"{% set x %}block {{ 1 + 1 }}{% endset %}{{ x | upper }}",
     "{}",
     "BLOCK 2"},
    {"{% filter upper %}abc {{ 'd' }}{% endfilter %}",
     "{}",
     "ABC D"},
    {"{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}",
     "{}",
     "0134"},
    {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x','c')) }} {{ 'aXbX'.replace('X', '-', 1) }} {{ '{} {}'.format(1, 'x') }}",
     "{}",
     "['a', 'b', '', 'c'] ['a', 'b'] True True a-bX 1 x"},
    {"{{ 'x' if true else 'y' }} {{ 'x' if false }}| {{ 1 if 0 else 2 if 0 else 3 }}",
     "{}",
     "x | 3"},
    {"{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ not 1 == 2 }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }}",
     "{}",
     "True True True True True True True"},
    {"  {% if true %}\n    x\n  {% endif %}\n  y  {%- if true %} z {% endif -%}  \n w {# c #}\n  {#- c2 -#}  q\n",
     "{}",
     "    x\n  y z w q"},
    {"a\n{%+ if true %}b{% endif %}\n  {{ 'v' }}\n{% raw %}{{ x }}{% endraw %}\n",
     "{}",
     "a\nb  v\n{{ x }}"},
    {"{{ xs | items | list }} {{ xs.get('a') }} {{ xs.get('z', 5) }} {{ xs.keys() | list }} {{ xs['a'] }} {{ xs.a }}",
     "{\"xs\": {\"a\": 1, \"b\": [1, \"x\"]}}",
     "[('a', 1), ('b', [1, 'x'])] 1 5 ['a', 'b'] 1 1"},
    {"{{ xs | tojson }} {{ xs }} {{ xs | string }} {{ (1, 'a') }} {{ none | string }}",
     "{\"xs\": {\"a\": \"it's\", \"b\": [1.5, null, true]}}",
     "{\"a\": \"it's\", \"b\": [1.5, null, true]} {'a': \"it's\", 'b': [1.5, None, True]} {'a': \"it's\", 'b': [1.5, None, True]} (1, 'a') None"},
    {"{{ '%s-%d' % ('a', 3) }} {{ 'x%sy' | format('Z') }} {{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int(7) }} {{ '2.5' | float }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ -3 | abs }}",
     "{}",
     "a-3 xZy 3 42 7 2.5 2.57 2.0 3"},
    {"{{ 'line1\nline2\n\nline4' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}",
     "{}",
     "line1\n  line2\n\n  line4|  a\n  b"},
    {"{{ messages[0].content.upper() }} {{ messages | length }} {{ messages[5] is defined }} {{ messages[0].nope is defined }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
     "HI 1 False False"},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}",
     "{}",
     "3,7,"},
    {"{{ [1, 2, 3] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ xs | rejectattr('n') | list }}",
     "{\"xs\": [{\"n\": 0}, {\"n\": 1}]}",
     "[1, 3] [2] [{'n': 0}]"},
    {"{{ 'Hello' | center(11) }}|{{ [1,2,3,4,5] | batch(2) | list }}|{{ 'a b' | replace(' ', '') }}|{{ 'ABC' | lower is lower }}",
     "{}",
     "   Hello   |[[1, 2], [3, 4], [5]]|ab|True"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1,) %}{{ t }}",
     "{}",
     "12(1,)"},
    {"{%- for m in messages -%}\n  {{- m.role }}: {{ m.content }}\n{% endfor -%}\n",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"user\", \"content\": \"Hi\"}]}",
     "user: Hi\nuser: Hi\n"},
    {"{{ x.y }}",
     "{\"x\": null}",
     ""},
    {"{{ d['missing'] }}|{{ d.missing is defined }}|{{ [1,2][10] is defined }}",
     "{\"d\": {}}",
     "|False|False"},
    {"{{ range(5) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}",
     "{}",
     "[0, 1, 2, 3, 4] [1, 4, 7] [5, 3, 1]"},
    {"{{ dict(a=1, b=2) }} {{ {'a': 1}.items() | list }} {{ 'ab' ~ {'x': [1]} }}",
     "{}",
     "{'a': 1, 'b': 2} [('a', 1)] ab{'x': [1]}"},
    {"{% if x %}a{% elif y %}b{% else %}c{% endif %}",
     "{\"y\": 1}",
     "b"},
    {"{{ \"double\" 'single' }} {{ 'esc\\t\\u00e9\\x41' }}",
     "{}",
     "doublesingle esc\téA"},
    {"{{ tools | tojson(indent=4) }}",
     "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]}",
     "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"f\",\n            \"parameters\": {}\n        }\n    }\n]"},
    {"{{ 'x' | tojson(separators=(',', ':')) }}{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
     "{}",
     "\"x\"{\"a\":[1,2]}{\"a\": 2, \"b\": 1}"},
    {"{{ strftime_now('%Y-%m-%d %A %B %j %b %d') }}",
     "{}",
     "2024-07-26 Friday July 208 Jul 26"},
    {"{{ 'abc' | reverse }} {{ [1, 2] | reverse | list }} {{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '　a　'.strip() }}|",
     "{}",
     "cba [2, 1] x|a|a|"},
    {"{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
     "1"},
    {"{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
     "{}",
     "aba"},
    {"{{ (messages|last).content }}{{ messages[-1]['content'] }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
     "HiHi"},
    {"{{ 5 is divisibleby 5 }} {{ 1 is sameas true }} {{ none is sameas none }} {{ 'a' is in ['a'] }} {{ 2 is gt 1 }} {{ x is eq 3 }}",
     "{\"x\": 3}",
     "True False True True True True"},
    {"{{ 'é' | length }} {{ 'αβγ' | upper }} {{ 'ÀÉ' | lower }} {{ '  ' | length }}",
     "{}",
     "1 ΑΒΓ àé 2"},
    {"  {% if true %}x{% endif %}",
     "{}",
     "x"},
    {"a  {% if true %}x{% endif %}  \n  b",
     "{}",
     "a  x  \n  b"},
    {"{{ '{{' }} {{ '%}' }} {{ {'a': {'b': 1}} }}",
     "{}",
     "{{ %} {'a': {'b': 1}}"},
    {"x\n\n",
     "{}",
     "x\n"},
    {"x\r\n{% if true %}\r\ny\r\n{% endif %}\r\n",
     "{}",
     "x\ny\n"},
    {"{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "{}",
     "113 214 1|123 224 2|"},
    {"{% macro m() %}{{ v }}{% endmacro %}{% set v = 5 %}{{ m() }}",
     "{}",
     "5"},
    {"{% for i in [1] %}{% if true %}{% set z = 3 %}{% endif %}{{ z }}{% endfor %}{{ z }}",
     "{}",
     "3"},
    {"{% if true %}{% set z = 3 %}{% endif %}{{ z }}",
     "{}",
     "3"},
    {"<{%- if true -%}  a  {%- endif -%}>",
     "{}",
     "<a>"},
    {"{#- comment -#}\n  a\n{# c #}\nb",
     "{}",
     "a\nb"},
    {"  {#- c #}\n  x",
     "{}",
     "  x"},
    {"{%- set x = 1 %}\n\n{{- x }}\n  {{ x -}}\n  !",
     "{}",
     "1\n  1!"},
    {"{{ x }}\n{%- if true %}\n  {{ y }}\n{% endif %}",
     "{\"x\": 1, \"y\": 2}",
     "1  2\n"},
    {"{% macro f(a, b=2) -%}\n  {{ a }}-{{ b }}\n{%- endmacro %}\n[{{ f(1) }}]",
     "{}",
     "[1-2]"},
    {"{% set d = {'k': [1, 2]} %}{{ d.k[1] }}{{ d['k'] | length }}",
     "{}",
     "22"},
    {"{{ 'a' 'b' }}{{ ('x' ~ 'y') | upper }}",
     "{}",
     "abXY"},
    {"{% set ns = namespace(items=[]) %}{{ ns.items }}",
     "{}",
     "[]"},
    {"{{ ([1, 2] + [3])[1:] }} {{ 'hello'[1:-1] }} {{ [1,2,3][-2:] }} {{ [1,2,3][:-5] }} {{ 'abc'[5:] }}",
     "{}",
     "[2, 3] ell [2, 3] [] "},
    {"{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% elif m.role == 'assistant' %}[{{ m.content }}]{% endif %}{% endfor %}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}",
     "a[b]"},
    {"{{ 1 if x is defined and x > 0 else -1 }} {{ not x is defined }} {{ x is defined and x }}",
     "{\"x\": 2}",
     "1 False 2"},
    {"{{ -1 | abs }} {{ - 1 }} {{ (-1) | abs }}",
     "{}",
     "1 -1 1"},
    {"{{ [1, 2, 3] | map('string') | join('-') }} {{ ['a', 'b'] | map('upper') | list }}",
     "{}",
     "1-2-3 ['A', 'B']"},
    {"{{ x | default(none) is none }} {{ y | d('q') }}",
     "{}",
     "True q"},
    {"{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2.0 * 3 }} {{ 1e16 }} {{ 123456789012345678 }} {{ 3 / 1 }}",
     "{}",
     "0.30000000000000004 0.3333333333333333 6.0 1e+16 123456789012345678 3.0"},
    {"{% for x in 'ab' %}{{ x }}.{% endfor %}{% for x in {'p': 1} %}{{ x }}{% endfor %}",
     "{}",
     "a.b.p"},
    {"{{ content.split('</think>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     "{\"content\": \"<think>\\nhmm\\n</think>\\n\\nAnswer\"}",
     "Answer|hmm"},
    {"{% for m in messages[::-1] %}{{ loop.index0 }}{{ m }}{% endfor %}",
     "{\"messages\": [\"a\", \"b\"]}",
     "0b1a"},
    {"{%- for key, val in tool.items() if key != 'return' %}{{ key }}:{{ val is string }};{% endfor %}",
     "{\"tool\": {\"name\": \"x\", \"return\": 1, \"p\": {}}}",
     "name:True;p:False;"},
    {"{{ xs | join(', ', attribute='n') }}",
     "{\"xs\": [{\"n\": 1}, {\"n\": 2}]}",
     "1, 2"},
    {"{{ 'hi' ~ 'é' | length }}",
     "{}",
     "hi1"},
    {"{{ xs|tojson }}",
     "{\"xs\": [\"\\u0001\x7f"" \", \"a\\\\b/\"]}",
     "[\"\\u0001\x7f"" \", \"a\\\\b/\"]"},
    {"{{ xs|tojson(ensure_ascii=True) }}",
     "{\"xs\": [\"😀é\"]}",
     "[\"\\ud83d\\ude00\\u00e9\"]"},
    {"{{ 9223372036854775807 + 0 }} {{ 2 ** 62 }}",
     "{}",
     "9223372036854775807 4611686018427387904"},
    {"{{ messages }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"it's \\\"q\\\"\\n\"}]}",
     "[{'role': 'user', 'content': 'it\\'s \"q\"\\n'}]"},
    {"{{ 3 * 'ab' }} {{ [0] * 3 }} {{ 'ab' < 'b' }} {{ [1, 2] < [1, 3] }}",
     "{}",
     "ababab [0, 0, 0] True True"},
    {"{% if x is not none %}a{% endif %}{% if x is none %}b{% endif %}",
     "{\"x\": null}",
     "b"},
    {"{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] | trim + '\\n\\n' %}\n{%- else %}\n    {%- set system_message = '' %}\n{%- endif %}\n{{- system_message }}X",
     "{\"messages\": [{\"role\": \"system\", \"content\": \" s \"}]}",
     "s\n\nX"},
};

class Jinja2Reference : public ::testing::TestWithParam<Row> {};

TEST_P(Jinja2Reference, RendersLikeJinja2) {
  const Row& row = GetParam();
  RenderOptions options;
  options.now = parse_datetime("2024-07-26T00:00:00");
  auto out = render(std::string(row.source), ojson::parse(row.context), options);
  ASSERT_TRUE(out.ok()) << row.source << "\n" << out.status().to_string();
  EXPECT_EQ(*out, row.expected) << row.source;
}

INSTANTIATE_TEST_SUITE_P(Rows, Jinja2Reference, ::testing::ValuesIn(kRows));

Result<std::string> run(const std::string& src, const ojson& ctx = ojson::object()) {
  return render(src, ctx);
}

TEST(Interpreter, UndefinedAttributeOfUndefinedIsAnError) {
  auto out = run("{{ foo.bar }}");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "template error at line 1, column 7: 'foo' is undefined");
}

TEST(Interpreter, MissingKeyIsUndefinedButItsAttributeIsAnError) {
  ojson ctx = {{"m", ojson::object()}};
  EXPECT_EQ(*run("[{{ m.content }}]{{ m.content is defined }}", ctx), "[]False");
  auto out = run("{{ m.content.content }}", ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'dict object' has no attribute 'content'"), std::string::npos)
      << out.status().message();
}

TEST(Interpreter, RaiseExceptionReturnsTheTemplatesMessageVerbatim) {
  auto out = run("a{{ raise_exception('Roles must alternate: ' ~ n) }}b", {{"n", 3}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Roles must alternate: 3");
}

TEST(Interpreter, TypeErrorsNameTheOperands) {
  auto out = run("{{ 1 + 'a' }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unsupported operand type(s) for +: 'int' and 'str'"),
            std::string::npos);
  out = run("{{ 'a' + 1 }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("can only concatenate str (not \"int\") to str"), std::string::npos);
}

TEST(Interpreter, IteratingNoneFailsLikePython) {
  auto out = run("{% for t in tools %}{% endfor %}", {{"tools", nullptr}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("'NoneType' object is not iterable"), std::string::npos);
  // An undefined variable iterates as empty (jinja2's default Undefined).
  EXPECT_EQ(*run("{% for t in tools %}x{% else %}none{% endfor %}"), "none");
}

TEST(Interpreter, ObjectKeyOrderIsKeptWithOrderedJson) {
  ojson ctx = ojson::parse(R"({"d": {"z": 1, "a": 2}})");
  EXPECT_EQ(*run("{{ d | tojson }}", ctx), R"({"z": 1, "a": 2})");
  // Plain nlohmann::json sorts keys; the API still renders it.
  nlohmann::json sorted = nlohmann::json::parse(R"({"d": {"z": 1, "a": 2}})");
  EXPECT_EQ(*render(std::string("{{ d | tojson }}"), sorted), R"({"a": 2, "z": 1})");
}

TEST(Interpreter, ParsedTemplateRendersManyContexts) {
  auto t = ChatTemplate::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}");
  ASSERT_TRUE(t.ok());
  ojson a = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};
  ojson b = {{"messages", {{{"role", "assistant"}, {"content", "y"}}, {{"role", "user"}, {"content", "z"}}}}};
  EXPECT_EQ(*t->render(a), "user:x;");
  EXPECT_EQ(*t->render(b), "assistant:y;user:z;");
}

TEST(Interpreter, ContextMustBeAnObject) {
  auto out = run("x", ojson::array());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
}

TEST(Interpreter, StrftimeNowUsesTheInjectedClock) {
  RenderOptions o;
  o.now = parse_datetime("2025-02-03T04:05:06");
  ASSERT_TRUE(o.now);
  auto out = render(std::string("{{ strftime_now('%d %b %Y %H:%M:%S %A') }}"), ojson::object(), o);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "03 Feb 2025 04:05:06 Monday");
  EXPECT_FALSE(parse_datetime("2024-02-30T00:00:00"));
  EXPECT_FALSE(parse_datetime("yesterday"));
  EXPECT_TRUE(parse_datetime("2024-07-26"));
}

TEST(Interpreter, DefaultChatmlTemplate) {
  ojson ctx = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  auto out = run(default_chatml_template(), ctx);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ctx["add_generation_prompt"] = false;
  EXPECT_EQ(*run(default_chatml_template(), ctx), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(Interpreter, GenerationBlockRendersItsBody) {
  EXPECT_EQ(*run("a{% generation %}b{% endgeneration %}c"), "abc");
}

TEST(Interpreter, ListAppendMutatesInPlace) {
  EXPECT_EQ(*run("{% set xs = [] %}{% for i in range(3) %}{% set _ = xs.append(i * 2) %}{% endfor %}{{ xs }}"),
            "[0, 2, 4]");
}

}  // namespace
}  // namespace ts::chat
