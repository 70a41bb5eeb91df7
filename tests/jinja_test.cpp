// The Jinja interpreter on its own: expressions, methods, filters, tests, statements,
// whitespace control (trim_blocks + lstrip_blocks), errors and unsupported features.
// The expected outputs of kCases were rendered by jinja2 3.1.6 set up as transformers sets it up
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols), its tojson).
#include "tokenizer/jinja/jinja.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

namespace {

using eg::jinja::Template;
using eg::jinja::Value;

std::string render(std::string_view tpl, const char* vars = "{}") {
  return Template(tpl).render(Value::from_json(nlohmann::ordered_json::parse(vars)));
}

// Expects eg::Error whose message contains `part`.
void expect_error(std::string_view tpl, const std::string& part, const char* vars = "{}") {
  try {
    const std::string out = render(tpl, vars);
    ADD_FAILURE() << "no error for: " << tpl.substr(0, 200) << "\n rendered: " << out.substr(0, 200);
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << tpl << "\n error: " << e.what();
  }
}

struct Case {
  const char* tpl;
  const char* vars;
  const char* want;
};

constexpr const char* kData = R"({"d": {"b": 2, "A": 1, "c": {"x": [1, 2]}, "items": "key wins"}, "l": [3, 1, 2], "s": "héllo", "n": null, "u8": "Ärger", "people": [{"name": "Bo", "age": 30}, {"name": "al", "age": 25}, {"name": "Cy"}]})";

const Case kCases[] = {
// ---- Expressions
    {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 2 ** 3 ** 2 }}",
     "{}",
     "7|9|3|-4|2|-2|64"},
    {"{{ 1 / 4 }}|{{ 10 / 5 }}|{{ 3 - 5 }}|{{ 1.5 + 1 }}|{{ -(2) }}|{{ +1 }}|{{ 2 ** -1 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}",
     "{}",
     "0.25|2.0|-2|2.5|-2|1|0.5|3.0|0.5"},
    {"{{ 1e16 }}|{{ 0.1 + 0.2 }}|{{ 1e-5 }}|{{ 0.0001 }}|{{ 123456789.0 * 1000 }}|{{ 1.0 }}|{{ -0.0 }}|{{ 2.5e-10 }}|{{ 1_000 }}",
     "{}",
     "1e+16|0.30000000000000004|1e-05|0.0001|123456789000.0|1.0|-0.0|2.5e-10|1000"},
    {"{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ nope }}|{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ 'x' * 0 }}",
     "{}",
     "a1NoneTrue1.0|ababab|xx|[1, 1]|[1, 2]|"},
    {"{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'a' < 'b' }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1, 2] == [1, 2] }}|{{ (1, 2) == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ none == none }}|{{ 2 >= 2.0 }}|{{ [1, 2] < [1, 3] }}",
     "{}",
     "True|False|True|True|True|True|False|True|True|True|True"},
    {"{{ 'x' in 'xyz' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'xyz' }}|{{ 'a' in nope }}|{{ none in [none] }}",
     "{}",
     "True|True|True|False|False|True"},
    {"{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 'y' }}|{{ none or [] }}|{{ not 0 }}|{{ not none and true }}|{{ nope or 'dflt' }}",
     "{}",
     "x|y||[]|True|True|dflt"},
    {"{{ 'a' if true else 'b' }}|{{ 'a' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}|{{ ('t' if d else 'f') }}",
     kData,
     "a||3|t"},
    {"{{ [1, 'a', none, true, 1.5, {'k': \"v's\"}, (1,), ()] }}|{{ (1, 2) }}|{{ {} }}|{{ [] }}",
     "{}",
     "[1, 'a', None, True, 1.5, {'k': \"v's\"}, (1,), ()]|(1, 2)|{}|[]"},
    {"{{ 'a\\nb\\t\\\\' }}|{{ \"it's\" }}|{{ 'x' 'y' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'unknown \\d escape' }}|{{ 'é' }}",
     "{}",
     "a\nb\t\\|it's|xy|éAA|unknown \\d escape|é"},
    {"{{ s[1] }}|{{ s[-1] }}|{{ s[1:3] }}|{{ l[::2] }}|{{ l[::-1] }}|{{ l[5] }}|{{ l[-2:] }}|{{ s[:-10] }}|{{ s[10:] }}|{{ l[1:2:0 + 1] }}",
     kData,
     "é|o|él|[3, 2]|[2, 1, 3]||[1, 2]|||[1]"},
    {"{{ d.c.x[1] }}|{{ d['c']['x'][0] }}|{{ d.c.x.0 }}|{{ d['items'] }}|{{ d.items() | list }}|{{ d.missing }}|{{ n.x }}|{{ d['A'] }}",
     kData,
     "2|1|1|key wins|[('b', 2), ('A', 1), ('c', {'x': [1, 2]}), ('items', 'key wins')]|||1"},
    {"{{ x }}",
     "{\"x\": {\"a\": \"it's\", \"b\": \"say \\\"hi\\\"\", \"c\": \"both ' \\\"\", \"d\": \"\\n\\t\\u0001\\u00a0\\u3000é\\u200b\"}}",
     "{'a': \"it's\", 'b': 'say \"hi\"', 'c': 'both \\' \"', 'd': '\\n\\t\\x01\\xa0\\u3000é\\u200b'}"},
    {"{{ x }}|{{ y }}|{{ z }}|{{ big }}",
     "{\"x\": 1.0, \"y\": 1e-07, \"z\": 48.85, \"big\": 9007199254740993}",
     "1.0|1e-07|48.85|9007199254740993"},
// ---- Methods
    {"[{{ ' a b '.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ '  l'.lstrip() }}][{{ 'r  '.rstrip() }}][{{ 'abcba'.lstrip('ab') }}]",
     "{}",
     "[a b][hi][l][r][cba]"},
    {"{{ 'a,b,,c'.split(',') }}|{{ ' a  b \\n'.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a b c '.split(none, 1) }}|{{ 'x'.split('x') }}|{{ ''.split() }}",
     "{}",
     "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a', 'b c ']|['', '']|[]"},
    {"{{ 'Hello'.upper() }}|{{ 'HeLLo'.lower() }}|{{ 'hello WORLD'.capitalize() }}|{{ u8.upper() }}|{{ u8.lower() }}|{{ 'straße'.upper() }}",
     kData,
     "HELLO|hello|Hello world|ÄRGER|ärger|STRASSE"},
    {"{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.startswith('abcd') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.replace('', '-') }}",
     "{}",
     "True|True|False|bba|-a-b-"},
    {"{{ s.find('l') }}|{{ s.find('z') }}|{{ '-'.join(['a', 'b']) }}|{{ ''.join(s) }}",
     kData,
     "2|-1|a-b|héllo"},
    {"{{ d.get('A') }}|{{ d.get('zz', 5) }}|{{ d.get('zz') }}|{{ d.keys() | list }}|{{ d.values() | list | length }}|{{ d.items() | first }}",
     kData,
     "1|5|None|['b', 'A', 'c', 'items']|4|('b', 2)"},
// ---- Filters
    {"[{{ '  x \\n' | trim }}][{{ '\\u3000x\\u00a0' | trim }}][{{ 'xxyxx' | trim('x') }}][{{ 42 | trim }}][{{ nope | trim }}]",
     "{}",
     "[x][x][y][42][]"},
    {"{{ 'aBc' | upper }}|{{ 'AbC' | lower }}|{{ 'hello World' | capitalize }}|{{ none | upper }}",
     "{}",
     "ABC|abc|Hello world|NONE"},
    {"{{ nope | default('d') }}|{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ 0 | d(5, boolean=true) }}|{{ nope | default }}|",
     "{}",
     "d|None|d|5||"},
    {"{{ s | length }}|{{ l | length }}|{{ d | length }}|{{ l | count }}|{{ nope | length }}",
     kData,
     "5|3|4|3|0"},
    {"{{ 'abc' | list }}|{{ d | list }}|{{ l | first }}|{{ l | last }}|{{ s | first }}|{{ s | last }}|{{ [] | first }}|{{ d | first }}",
     kData,
     "['a', 'b', 'c']|['b', 'A', 'c', 'items']|3|2|h|o||b"},
    {"{{ l | join(', ') }}|{{ l | join }}|{{ people | join('/', attribute='name') }}|{{ 'abc' | join('.') }}",
     kData,
     "3, 1, 2|312|Bo/al/Cy|a.b.c"},
    {"{{ 'aXbX' | replace('X', '-') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 5 | string }}|{{ [1] | string }}|{{ 'x' | safe }}",
     "{}",
     "a-b-|bba|5|[1]|x"},
    {"{{ '42' | int }}|{{ ' 4.7 ' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ true | int }}|{{ '1_000' | int }}|{{ none | int }}",
     "{}",
     "42|4|0|7|3|1|1000|0"},
    {"{{ '1.5' | float }}|{{ 'x' | float }}|{{ 2 | float }}|{{ ' -3e2 ' | float }}|{{ -3 | abs }}|{{ -2.5 | abs }}",
     "{}",
     "1.5|0.0|2.0|-300.0|3|2.5"},
    {"{{ d | items | list }}|{{ nope | items | list }}",
     "{\"d\": {\"z\": 1, \"a\": [2]}}",
     "[('z', 1), ('a', [2])]|[]"},
    {"{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | dictsort(true) %}{{ k }};{% endfor %}|{% for k, v in d | dictsort(reverse=true) %}{{ k }};{% endfor %}|{{ e | dictsort(by='value') }}",
     "{\"d\": {\"b\": 2, \"A\": 1, \"a\": 3, \"B\": 4, \"Ärger\": 0, \"zz\": 5}, \"e\": {\"x\": 3, \"y\": 1, \"z\": 2}}",
     "A=1;a=3;b=2;B=4;zz=5;Ärger=0;|A;B;a;b;zz;Ärger;|Ärger;zz;b;B;A;a;|[('y', 1), ('z', 2), ('x', 3)]"},
    {"{{ l | sort }}|{{ l | sort(reverse=true) }}|{{ ['b', 'A', 'a', 'C'] | sort }}|{{ ['b', 'A', 'a', 'C'] | sort(case_sensitive=true) }}|{{ people | sort(attribute='name') | map(attribute='name') | list }}",
     kData,
     "[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b', 'C']|['A', 'C', 'a', 'b']|['al', 'Bo', 'Cy']"},
    {"{{ ['a', 'A', 'b', 'a'] | unique | list }}|{{ [1, 2, 1] | unique | list }}|{{ 'héllo' | reverse }}|{{ l | reverse | list }}",
     kData,
     "['a', 'b']|[1, 2]|olléh|[2, 1, 3]"},
    {"{{ ['a', 'b'] | map('upper') | list }}|{{ people | map(attribute='age', default=0) | list }}|{{ ['1', '2'] | map('int') | list }}|{{ [' a', 'b '] | map('trim') | join }}",
     kData,
     "['A', 'B']|[30, 25, 0]|[1, 2]|ab"},
    {"{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ [0, 1, '', 'x', none] | select | list }}|{{ [1, none] | reject('none') | list }}|{{ l | select('>', 1) | list }}|{{ l | select('divisibleby', 3) | list }}",
     kData,
     "[3, 1]|[2]|[1, 'x']|[1]|[3, 2]|[3]"},
    {"{{ people | selectattr('age') | map(attribute='name') | list }}|{{ people | rejectattr('age') | map(attribute='name') | list }}|{{ people | selectattr('name', 'equalto', 'al') | list }}|{{ people | selectattr('age', 'defined') | selectattr('age', 'gt', 26) | map(attribute='name') | join }}",
     kData,
     "['Bo', 'al']|['Cy']|[{'name': 'al', 'age': 25}]|Bo"},
    {"{% if [] | select %}generator is true{% endif %}|{{ [] | select | list | length }}",
     "{}",
     "generator is true|0"},
    {"{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(ensure_ascii=true) }}|{{ x | tojson(separators=(',', ':'), sort_keys=true) }}|{{ [] | tojson(indent=2) }}|{{ 'é\\n\"' | tojson }}",
     "{\"x\": {\"b\": [1, 2.5, null, true, {}], \"a\": \"é\\u0001\\u2028\", \"c\": {\"k\": []}}}",
     "{\"b\": [1, 2.5, null, true, {}], \"a\": \"é\\u0001 \", \"c\": {\"k\": []}}|{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true,\n    {}\n  ],\n  \"a\": \"é\\u0001 \",\n  \"c\": {\n    \"k\": []\n  }\n}|{\"b\": [1, 2.5, null, true, {}], \"a\": \"\\u00e9\\u0001\\u2028\", \"c\": {\"k\": []}}|{\"a\":\"é\\u0001 \",\"b\":[1,2.5,null,true,{}],\"c\":{\"k\":[]}}|[]|\"é\\n\\\"\""},
// ---- Tests
    {"{{ x is defined }}|{{ nope is defined }}|{{ nope is undefined }}|{{ none is none }}|{{ 0 is none }}|{{ x is not none }}",
     "{\"x\": 1}",
     "True|False|True|True|False|True"},
    {"{{ true is boolean }}|{{ 1 is boolean }}|{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ 1 is integer }}|{{ true is integer }}|{{ 1.0 is float }}|{{ true is number }}|{{ 'x' is number }}",
     "{}",
     "True|False|True|False|True|True|False|True|True|False"},
    {"{{ 'x' is string }}|{{ d is mapping }}|{{ l is mapping }}|{{ d is sequence }}|{{ nope is sequence }}|{{ n is sequence }}|{{ s is sequence }}|{{ 1 is sequence }}",
     kData,
     "True|True|False|True|True|False|True|False"},
    {"{{ d is iterable }}|{{ nope is iterable }}|{{ 1 is iterable }}|{{ n is iterable }}|{{ range is callable }}|{{ 'x' is callable }}|{{ nope is callable }}",
     kData,
     "True|True|False|False|True|False|True"},
    {"{{ 3 is odd }}|{{ 3 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ 1 is eq 1 }}|{{ 1 is equalto 2 }}|{{ 1 is ne 2 }}|{{ 1 is lt 2 }}|{{ 2 is le 2 }}|{{ 3 is gt 2 }}|{{ 3 is ge 4 }}|{{ 2 is in [1, 2] }}",
     "{}",
     "True|False|True|False|True|False|True|True|True|True|False|True"},
    {"{{ none is sameas none }}|{{ false is sameas false }}|{{ 0 is sameas false }}|{{ l is sameas l }}|{{ 'abc' is lower }}|{{ 'aBc' is lower }}|{{ 'ABC' is upper }}|{{ '12' is upper }}",
     kData,
     "True|True|False|True|True|False|True|False"},
// ---- Statements
    {"{% if 0 %}a{% elif none %}b{% elif 'x' %}c{% else %}d{% endif %}|{% if [] %}e{% else %}f{% endif %}",
     "{}",
     "c|f"},
    {"{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }}{{ loop.depth }};{% endfor %}",
     kData,
     "1032TrueFalse31a1;2121FalseFalse332b1;3210FalseTrue31a1;"},
    {"{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}/{{ loop.length }};{% else %}none{% endfor %}|{% for x in l if x > 5 %}x{% else %}none{% endfor %}",
     kData,
     "empty|3/2;2/2;|none"},
    {"{% for k, v in d.items() %}{{ k }};{% endfor %}|{% for k in d %}{{ k }};{% endfor %}|{% for c in s %}{{ c }}.{% endfor %}|{% for a, b in [[1, 2], 'xy'] %}{{ a }}{{ b }}{% endfor %}|{% for x in nope %}x{% endfor %}",
     kData,
     "b;A;c;items;|b;A;c;items;|h.é.l.l.o.|12xy|"},
    {"{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in [1, 2] %}{% set outer = loop %}{% for y in [3, 4] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}",
     kData,
     "3|11 12 21 22 "},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}[{{ x }}]{% endfor %}{{ x }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}|{% for i in [1, 2] %}{% if i == 2 %}{{ z }}{% endif %}{% set z = i %}{% endfor %}",
     "{}",
     "[10][20]1|5|"},
    {"{% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }}{{ ns.items }}{{ ns.missing }}",
     "{}",
     "6[1, 2, 3]"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{% set c, e = t %}{{ c }}{{ e }}|{% set blk %}  in {{ a }} block {% endset %}[{{ blk }}]",
     "{}",
     "12|34|[  in 1 block ]"},
    {"{% macro m(a, b='B', c=none) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}{{ m(a='k') | trim }}",
     "{}",
     "<1BNone><12None><1B3><BNone><kBNone>"},
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}|{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}B{{ g }}{% endmacro %}{% set g = 'G' %}{{ a() }}",
     "{}",
     "120|BG"},
    {"{% macro m() %}{{ v }}{% endmacro %}{% set v = 'top' %}{% for v in ['loop'] %}{{ m() }}{% endfor %}|{% macro ns_user() %}{% set ns = namespace(x=1) %}{% set ns.x = 2 %}{{ ns.x }}{% endmacro %}{% set ns = namespace(x=0) %}{{ ns_user() }}{{ ns.x }}",
     "{}",
     "top|20"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}|{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}",
     "{}",
     "<b>bold 2</b>|[1][2]"},
    {"{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ range(3, 0, -1) | list }}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}",
     "{}",
     "[0, 1, 2]|[1, 3, 5]|[3, 2, 1]|{'a': 1, 'b': 'x'}|1"},
// ---- Whitespace
    {"{% if true %}\nx{% endif %}\ny",
     "{}",
     "xy"},
    {"  {% if true %}\n  x\n  {% endif %}\nend\n",
     "{}",
     "  x\nend"},
    {"a  {%- if true -%}  \n b \n  {%- endif -%}\n\n c",
     "{}",
     "abc"},
    {"a {{- ' b ' -}} c\n{{ 'd' }}\ne",
     "{}",
     "a b c\nd\ne"},
    {"a\n  {#- comment -#}\n  b\n  {# c2 #}\n  c",
     "{}",
     "ab\n  c"},
    {"  {%+ if true %}x{% endif +%}\ny",
     "{}",
     "  x\ny"},
    {"x\n",
     "{}",
     "x"},
    {"x\n\n",
     "{}",
     "x\n"},
    {"a\r\nb\rc{% if true %}\r\nd{% endif %}",
     "{}",
     "a\nb\ncd"},
    {"\t {% for i in [1, 2] %}\n\t{{ i }}\n {% endfor %}\n",
     "{}",
     "\t1\n\t2\n"},
    {"{{ {'a': {'b': 1}} }}|{{ [[1]] }}",
     "{}",
     "{'a': {'b': 1}}|[[1]]"},
    {"{% set x = 1 -%}\n   {{ x }}  {#- c #}  \n   {% if x %}y{% endif %}",
     "{}",
     "1  \ny"},
};

TEST(Jinja, MatchesJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.tpl);
    EXPECT_EQ(render(c.tpl, c.vars), c.want);
  }
}

TEST(Jinja, GenerationBlockRendersItsBody) {
  // transformers' AssistantTracker tag: the body renders as is (in its own scope).
  EXPECT_EQ(render("{% generation %}gen {{ 1 }}{% set x = 2 %}{% endgeneration %}[{{ x }}]"), "gen 1[]");
}

TEST(Jinja, UndefinedValues) {
  EXPECT_EQ(render("[{{ nope }}][{{ nope | upper }}][{{ nope ~ 'a' }}][{{ nope == nope }}][{{ nope is none }}]"),
            "[][][a][True][False]");
  expect_error("{{ nope.x }}", "'nope' is undefined");
  expect_error("{{ nope['x'] }}", "'nope' is undefined");
  expect_error("{{ 'a' + nope }}", "'nope' is undefined");
  expect_error("{{ nope + 1 }}", "is undefined");
  expect_error("{{ nope() }}", "'nope' is undefined");
  expect_error("{{ -nope }}", "is undefined");
  expect_error("{{ nope < 1 }}", "is undefined");
  expect_error("{% macro m(a) %}{{ a.x }}{% endmacro %}{{ m() }}", "parameter 'a' was not provided");
}

// The resource limits of one render (interpreter.cpp, docs/reliability.md): each limit is reached
// by a template just past it, and a template just under it renders.
TEST(Jinja, ResourceLimits) {
  // Rendered text: at most 32 MiB.
  EXPECT_EQ(render("{% for i in range(2) %}{{ 'x' * 16000000 }}{% endfor %}").size(), 32000000u);
  expect_error("{% for i in range(3) %}{{ 'x' * 16000000 }}{% endfor %}", "the rendered text exceeds 32 MiB");
  // ... also when the text is built inside a macro or a block set and printed at once.
  expect_error("{% macro m() %}{% for i in range(3) %}{{ 'x' * 16000000 }}{% endfor %}{% endmacro %}{{ m() }}",
               "the rendered text exceeds 32 MiB");
  // Loop iterations + macro calls: at most 2,000,000 per render (nested loops, recursion). (That
  // the longest conversation the server accepts renders within it: server_limits_test.)
  EXPECT_EQ(render("{% for a in range(100) %}{% for b in range(100) %}{% endfor %}{% endfor %}ok"), "ok");
  expect_error("{% for a in range(1000) %}{% for b in range(2000) %}{% endfor %}{% endfor %}",
               "more than 2000000 loop iterations and macro calls");
  expect_error("{% macro f() %}{% endmacro %}{% for a in range(1000) %}{% for b in range(1000) %}{{ f() }}{% endfor %}{% endfor %}",
               "more than 2000000 loop iterations and macro calls");
  // Macro recursion: at most 200 deep; one string repetition at most 64 MiB; range() 100000 items.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}end{% endif %}{% endmacro %}{{ f(199) }}"), "end");
  expect_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(200) }}", "recursion deeper than 200");
  expect_error("{{ 'ab' * 40000000 }}", "string repetition beyond 64 MiB");
  expect_error("{{ range(100001) | length }}", "range too big");
}

TEST(Jinja, RuntimeErrors) {
  expect_error("x\n{{ 1 + 'a' }}", "chat template: line 2: unsupported operand type(s) for +: 'int' and 'str'");
  expect_error("{{ 'a' + 1 }}", "can only concatenate str");
  expect_error("{{ 1 / 0 }}", "division by zero");
  expect_error("{{ 1 // 0 }}", "division or modulo by zero");
  expect_error("{{ 1 < 'a' }}", "'<' not supported");
  expect_error("{{ 1 in 'abc' }}", "requires string as left operand");
  expect_error("{{ 'a' in 3 }}", "is not iterable");
  expect_error("{% for x in 3 %}{% endfor %}", "'int' object is not iterable");
  expect_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", "cannot unpack");
  expect_error("{{ 1() }}", "'int' object is not callable");
  expect_error("{% set d = {} %}{% set d.x = 1 %}", "cannot assign attribute on non-namespace object");
  expect_error("{{ range(200000) | length }}", "range too big");
  expect_error("{{ range(1, 2, 0) }}", "must not be zero");
  expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursion deeper than");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "takes not more than 1 argument");
  expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "no keyword argument 'b'");
  expect_error("{{ 'x'.split('') }}", "empty separator");
  expect_error("{{ [1, 2][::0] }}", "slice step cannot be zero");
  expect_error("{{ {} | dictsort(by='x') }}", "sort by either");
  expect_error("{{ [1, 'a'] | sort }}", "not supported between");
  expect_error("{{ nope | tojson }}", "Object of type Undefined is not JSON serializable");
  expect_error("{{ 'a' | trim(1, 2) }}", "takes at most 1 argument");
  expect_error("{{ 'a' | default(foo=1) }}", "unexpected keyword argument 'foo'");
  expect_error("{{ 9223372036854775807 + 1 }}", "unsupported Jinja feature 'integer arithmetic beyond 64 bits'");
}

TEST(Jinja, RaiseException) {
  try {
    render("a{{ raise_exception('Bad: ' ~ 42) }}");
    ADD_FAILURE() << "no error";
  } catch (const eg::jinja::TemplateRaise& e) {
    EXPECT_EQ(e.message(), "Bad: 42");
    EXPECT_STREQ(e.what(), "chat template: Bad: 42");
  }
}

TEST(Jinja, SyntaxErrors) {
  expect_error("{% if x %}", "chat template: syntax error at line 1: missing '{% endif %}'");
  expect_error("{% for x in y %}\n", "missing '{% endfor %}'");
  expect_error("{{ 1 + }}", "syntax error at line 1");
  expect_error("a\n\n{% endfor %}", "syntax error at line 3: unexpected '{% endfor %}'");
  expect_error("{{ 'abc }}", "unterminated string literal");
  expect_error("{% for x in %}{% endfor %}", "expected an expression");
  expect_error("{{ x | }}", "expected a name");
  expect_error("{{ x", "unclosed '{{'");
  expect_error("{# x", "unclosed comment");
  expect_error("{{ 1 ]}}", "unexpected ']'");
  expect_error("{{ (1 }}", "unexpected '}'");
  expect_error("{% break %}", "'break' outside a loop");
  expect_error("{% for x in y %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", "'break' outside a loop");
  expect_error("{{ f(a=1, 2) }}", "positional argument after a keyword argument");
  expect_error("{{ x is defined is none }}", "syntax error");
  expect_error("{{ 1 @ 2 }}", "unexpected character '@'");
  expect_error("{% set %}", "expected a name");
  expect_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "nests too deeply");
  std::string deep_if;
  for (int i = 0; i < 1000; ++i) deep_if += "{% if true %}";
  expect_error(deep_if, "nests too deeply");
  expect_error("{{" + std::string(3000, '-') + "1 }}", "nests too deeply");
}

TEST(Jinja, UnsupportedFeatures) {
  auto unsupported = [](std::string_view tpl, const std::string& what, int line = 1) {
    expect_error(tpl, "chat template: unsupported Jinja feature '" + what + "' at line " + std::to_string(line));
  };
  unsupported("{% include 'x' %}", "include");
  unsupported("{% extends 'x' %}", "extends");
  unsupported("{% import 'x' as y %}", "import");
  unsupported("{% block b %}{% endblock %}", "block");
  unsupported("{% filter upper %}x{% endfilter %}", "filter");
  unsupported("{% with a = 1 %}{% endwith %}", "with");
  unsupported("{% autoescape true %}{% endautoescape %}", "autoescape");
  unsupported("{% do x %}", "do");
  unsupported("a\n{% raw %}{{ x }}{% endraw %}", "raw", 2);
  unsupported("{{ x | wordwrap }}", "filter wordwrap");
  unsupported("{{ x | indent(2) }}", "filter indent");
  unsupported("{{ x is escaped }}", "test escaped");
  unsupported("{% for x in y recursive %}{% endfor %}", "recursive for loop");
  unsupported("{% macro m() %}{{ varargs }}{% endmacro %}", "varargs in a macro");
  unsupported("{% macro m() %}{{ kwargs }}{% endmacro %}", "kwargs in a macro");
  unsupported("{% macro m(*a) %}{% endmacro %}", "*args in a macro signature");
  unsupported("{{ f(*a) }}", "*args / **kwargs in a call");
  unsupported("{{ x[1, 2] }}", "tuple subscript");
  unsupported("{% set x | upper %}a{% endset %}", "filtered block set");
  unsupported("{{ 0x1F }}", "binary/octal/hex integer literal");
  unsupported("{{ '\\N{BULLET}' }}", "\\N{...} string escape");
  unsupported("{{ 99999999999999999999 }}", "integer literal beyond 64 bits");
  // Reached at run time:
  unsupported("\n\n{{ '%s' % 1 }}", "string formatting with %", 3);
  unsupported("{{ 'a {}'.format(1) }}", "str.format");
  unsupported("{{ 'abc'.title() }}", "str.title");
  unsupported("{% if 'a'.isdigit %}{% endif %}", "str.isdigit");
  unsupported("{{ {}.update({}) }}", "dict.update");
  unsupported("{{ [].append(1) }}", "list.append");
  unsupported("{{ [1] | map('upper') }}", "printing a generator (add | list)");
  unsupported("{{ [1] | select | length }}", "length of a generator (add | list)");
  unsupported("{{ ([1] | reverse)[0] }}", "indexing a generator (add | list)");
  unsupported("{{ [1] | map('wordwrap') | list }}", "filter wordwrap");
  unsupported("{{ [1] | select('escaped') | list }}", "test escaped");
  unsupported("{{ namespace() }}", "printing a Namespace");
  unsupported("{{ range }}", "printing a function");
  unsupported("{% for x in [1] %}{{ loop.changed(x) }}{% endfor %}", "loop.changed");
  unsupported("{{ 1 is sameas 1 }}", "sameas on numbers or strings (Python object identity)");
  unsupported("{{ 'x' | int(base=16) }}", "int filter with a base other than 10");
  unsupported("{{ {1: 2} }}", "dict literal with a non-string key");
  unsupported("{{ 'ǅ' | upper }}", "upper/lower of U+01C5");
  unsupported("{{ 'ΣΑ' | lower }}", "upper/lower of U+03A3");
}

TEST(Jinja, Lines) {
  // Line numbers count the template's newlines, including those whitespace control removed.
  expect_error("a\n{%- if true -%}\n\n{{ 1 + 'x' }}{% endif %}", "line 4:");
  expect_error("{# a\nb #}\n{{ 1 + 'x' }}", "line 3:");
  expect_error("{{ 'a\nb' }}{{ 1 + 'x' }}", "line 2:");
}

TEST(Jinja, TemplateIsReusable) {
  const Template t("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  const Value two = Value::from_json(nlohmann::json::parse(R"({"messages": [1, 2]})"));
  EXPECT_EQ(t.render(two), "2");
  EXPECT_EQ(t.render(two), "2");
  EXPECT_THROW(t.render(Value("not a dict")), eg::Error);
}

TEST(PyStr, FloatRepr) {
  using eg::jinja::py::float_repr;
  EXPECT_EQ(float_repr(0.0), "0.0");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(9999999999999998.0), "9999999999999998.0");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(0.00012345), "0.00012345");
  EXPECT_EQ(float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(float_repr(1e100), "1e+100");
  EXPECT_EQ(float_repr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(float_repr(5e-324), "5e-324");
  EXPECT_EQ(float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(float_repr(123.456), "123.456");
  EXPECT_EQ(float_repr(1.0 / 0.0), "inf");
  EXPECT_EQ(float_repr(-1.0 / 0.0), "-inf");
}

TEST(PyStr, CaseMappingMatchesPython) {
  using eg::jinja::py::lower;
  using eg::jinja::py::upper;
  // Expected values from Python 3's str.upper()/str.lower().
  EXPECT_EQ(upper("abcxyz àéîõüÿ µ ß ŉ ı ſ"), "ABCXYZ ÀÉÎÕÜŸ Μ SS ʼN I S");
  EXPECT_EQ(lower("ABCXYZ ÀÉÎÕÜ Ÿ İ"), "abcxyz àéîõü ÿ i̇");
  EXPECT_EQ(upper("āăąćĉċčďđēĸĺļľŀłńņňŋōŏőœŕŗřśŝşšţťŧũūŭůűųŵŷźżž"),
            "ĀĂĄĆĈĊČĎĐĒĸĹĻĽĿŁŃŅŇŊŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŹŻŽ");
  EXPECT_EQ(lower("ĀĂĄĆĈĊČĎĐĒĹĻĽĿŁŃŅŇŊŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŹŻŽ"),
            "āăąćĉċčďđēĺļľŀłńņňŋōŏőœŕŗřśŝşšţťŧũūŭůűųŵŷźżž");
  EXPECT_EQ(upper("αβγδεζηθικλμνξοπρςστυφχψω άέήίόύώϊϋ"), "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΣΤΥΦΧΨΩ ΆΈΉΊΌΎΏΪΫ");
  EXPECT_EQ(lower("ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΤΥΦΧΨΩ ΆΈΉΊΌΎΏΪΫ"), "αβγδεζηθικλμνξοπρτυφχψω άέήίόύώϊϋ");
  EXPECT_EQ(upper("абвгдежзийклмнопрстуфхцчшщъыьэюя ёђѓєѕіїјљњћќѝўџ ѡѣ ґ ӂ ӏ ӑ"),
            "АБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ ЁЂЃЄЅІЇЈЉЊЋЌЍЎЏ ѠѢ Ґ Ӂ Ӏ Ӑ");
  EXPECT_EQ(lower("АБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ ЁЂЃЄЅІЇЈЉЊЋЌЍЎЏ ѠѢ Ґ Ӂ Ӏ Ӑ"),
            "абвгдежзийклмнопрстуфхцчшщъыьэюя ёђѓєѕіїјљњћќѝўџ ѡѣ ґ ӂ ӏ ӑ");
  EXPECT_EQ(upper("ａｚ 中文 ㄱ ١٢ 🙂"), "ＡＺ 中文 ㄱ ١٢ 🙂");
  EXPECT_THROW(upper("ǅ"), eg::Error);   // Latin Extended-B: not mapped
  EXPECT_THROW(lower("Ꭰ"), eg::Error);   // Cherokee
  EXPECT_THROW(upper("ẞ"), eg::Error);  // Latin Extended Additional
}

TEST(PyStr, ReprAndJson) {
  using eg::jinja::py::json_quote;
  using eg::jinja::py::repr;
  EXPECT_EQ(repr("a'b"), "\"a'b\"");
  EXPECT_EQ(repr("a'b\""), "'a\\'b\"'");
  EXPECT_EQ(repr("\x7f\x1f\u00ad\u2028\U000E0001 é"), "'\\x7f\\x1f\\xad\\u2028\\U000e0001 é'");
  EXPECT_EQ(json_quote("é\n\x01\u2028😀", false), "\"é\\n\\u0001\u2028😀\"");
  EXPECT_EQ(json_quote("é\x7f😀", true), "\"\\u00e9\\u007f\\ud83d\\ude00\"");
}

}  // namespace
