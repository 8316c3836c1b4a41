// Unit tests of the Jinja engine (jinja/jinja.h). Expected strings are what
// Python Jinja2 3.1 renders in transformers' environment;
// tests/chat/check_chat_templates.py compares against Jinja2 itself on the
// real chat templates.
#include "jinja/jinja.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/testing/status_matchers.h"

namespace shardlm::jinja {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::ordered_json;

// Renders with transformers' options (trim_blocks, lstrip_blocks); failures
// come back as "ERROR: message" so that EXPECT_EQ shows them.
std::string Render(std::string_view source, const json& context = json::object(),
                   const Options& options = Options::HuggingFace()) {
  absl::StatusOr<Template> t = Template::Parse(source, options);
  if (!t.ok()) return "ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(context);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

absl::Status RenderStatus(std::string_view source, const json& context = json::object(),
                          const Options& options = Options::HuggingFace()) {
  absl::StatusOr<Template> t = Template::Parse(source, options);
  if (!t.ok()) return t.status();
  return t->Render(context).status();
}

TEST(JinjaTest, TextAndVariables) {
  EXPECT_EQ(Render("plain text"), "plain text");
  EXPECT_EQ(Render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(Render("{{ m.role }}/{{ m['content'] }}", {{"m", {{"role", "user"}, {"content", "hi"}}}}),
            "user/hi");
  EXPECT_EQ(Render("[{{ missing }}][{{ missing is defined }}][{{ 'x' if missing else 'y' }}]"),
            "[][False][y]");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(Render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(Render("a\n  {{- ' b ' -}}  \n c"), "a b c");
  EXPECT_EQ(Render("a {# comment #} b"), "a  b");
  EXPECT_EQ(Render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  // Jinja drops one trailing newline unless asked to keep it.
  EXPECT_EQ(Render("x\n"), "x");
  Options keep;
  keep.keep_trailing_newline = true;
  EXPECT_EQ(Render("x\n", json::object(), keep), "x\n");
  EXPECT_EQ(Render("a\r\nb"), "a\nb");
}

TEST(JinjaTest, TrimAndLstripBlocks) {
  const std::string source = "<ul>\n  {% for x in xs %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>";
  const json ctx = {{"xs", {1, 2}}};
  EXPECT_EQ(Render(source, ctx), "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>");
  EXPECT_EQ(Render(source, ctx, Options()), "<ul>\n  \n  <li>1</li>\n  \n  <li>2</li>\n  \n</ul>");
  // '+' opts a tag out of lstrip_blocks (before) and trim_blocks (after).
  EXPECT_EQ(Render("  {%+ if true +%}\nx{% endif %}"), "  \nx");
  // lstrip_blocks never touches {{ }}.
  EXPECT_EQ(Render("  {{ 1 }}"), "  1");
}

TEST(JinjaTest, IfElifElse) {
  const std::string source = "{% if n > 1 %}many{% elif n == 1 %}one{% else %}none{% endif %}";
  EXPECT_EQ(Render(source, {{"n", 5}}), "many");
  EXPECT_EQ(Render(source, {{"n", 1}}), "one");
  EXPECT_EQ(Render(source, {{"n", 0}}), "none");
}

TEST(JinjaTest, ForLoopVariables) {
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
            "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 ");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}"),
            "-2|1-3|2-|");
  EXPECT_EQ(Render("{% for x in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "abab");
}

TEST(JinjaTest, ForLoopForms) {
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"z", 1}, {"a", 2}}}}),
            "z=1;a=2;");  // dict order is insertion order
  EXPECT_EQ(Render("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }},{% endfor %}"),
            "15,35,55,75,95,");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(Render("{% for x in missing %}x{% endfor %}"), "");
}

TEST(JinjaTest, ScopingFollowsJinja) {
  // Each loop iteration starts from the outer value; nothing leaks out.
  EXPECT_EQ(
      Render("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"),
      "1212121");
  EXPECT_EQ(Render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  // A namespace carries state out of a loop.
  EXPECT_EQ(Render("{% set ns = namespace(found=false) %}{% for x in [1, 2] %}"
                   "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}"),
            "True");
  EXPECT_EQ(Render("{% set messages = messages[1:] %}{{ messages }}", {{"messages", {1, 2}}}), "[2]");
  EXPECT_EQ(Render("{% set s | upper %}a{{ 1 }}{% endset %}{{ s }}"), "A1");
  EXPECT_EQ(Render("{% with a = 2 %}{{ a }}{% endwith %}[{{ a }}]"), "2[]");
}

TEST(JinjaTest, Macros) {
  EXPECT_EQ(Render("{% macro tag(name, cls='c') %}<{{ name }} {{ cls }}>{% endmacro %}"
                   "{{ tag('a') }}{{ tag('b', cls='d') }}{{ tag(name='i') }}"),
            "<a c><b d><i c>");
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
            "321");
  EXPECT_EQ(Render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(JinjaTest, Literals) {
  EXPECT_EQ(Render(R"({{ 'it\'s' }} {{ "tab\there" }} {{ '\u00e9\x41\n' }})"), "it's tab\there éA\n");
  EXPECT_EQ(Render("{{ 'ab' 'cd' }} {{ 1_000 }} {{ 0x1f }} {{ 1e3 }} {{ 2.50 }}"), "abcd 1000 31 1000.0 2.5");
  EXPECT_EQ(Render("{{ [1, 'a', none, True, false] }} {{ (1,) }} {{ (1, 2) }} {{ {'k': 'v'} }}"),
            "[1, 'a', None, True, False] (1,) (1, 2) {'k': 'v'}");
}

TEST(JinjaTest, PrintsLikePython) {
  EXPECT_EQ(Render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 1 / 3 }} {{ -0.0 }}"),
            "1.0 0.30000000000000004 1e+16 1000000000000000.0 1.5e-05 0.3333333333333333 -0.0");
  EXPECT_EQ(Render("{{ x }}", {{"x", {{"a", {1.5, nullptr, "it's", "q\"'"}}}}}),
            R"({'a': [1.5, None, "it's", 'q"\'']})");
  EXPECT_EQ(Render("{{ ['\\n', '\\\\', 'é'] }}"), R"(['\n', '\\', 'é'])");
}

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }}"),
            "3 -4 2 3.5 1024 64");
  EXPECT_EQ(Render("{{ 'ab' * 2 }} {{ [0] * 2 }} {{ 'a' ~ 1 ~ none }} {{ 1 + 2 * 3 }} {{ -2 ** 2 }}"),
            "abab [0, 0] a1None 7 4");
  EXPECT_EQ(Render("{{ '%s is %d'|format('x', 3) }} {{ '%05.1f' % 3.14159 }}"), "x is 3 003.1");
}

TEST(JinjaTest, ComparisonsAndLogic) {
  EXPECT_EQ(
      Render("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 3 not in [1] }} {{ 'k' in {'k': 1} }}"),
      "True True True True True");
  EXPECT_EQ(Render("{{ 0 or 'x' }}|{{ '' and 'y' }}|{{ not none }}|{{ 'a' if false }}"), "x||True|");
}

TEST(JinjaTest, Subscripts) {
  const json ctx = {{"s", "héllo"}, {"l", {1, 2, 3}}};
  EXPECT_EQ(
      Render("{{ s[1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s[-2:] }} {{ l[-1] }} {{ l[::-1] }} {{ l[:1] }}", ctx),
      "é olléh él lo 3 [3, 2, 1] [1]");
  EXPECT_EQ(Render("[{{ l[10] }}] {{ l.0 }} {{ s|length }}", ctx), "[] 1 5");
}

TEST(JinjaTest, Filters) {
  const json ctx = {{"l", {3, 1, 2, 3}},
                    {"d", {{"b", 2}, {"A", 3}}},
                    {"u", {{{"n", "x"}, {"ok", true}}, {{"n", "y"}, {"ok", false}}}}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ '  hi \\n'|trim }}", "hi"},
      {"{{ 'xhix'|trim('x') }}", "hi"},
      {"{{ 'aB'|upper }}{{ 'aB'|lower }}", "ABab"},
      {"{{ 'hello WORLD'|capitalize }}", "Hello world"},
      {"{{ 'hello-world x'|title }}", "Hello-World X"},
      {"{{ 'aaa'|replace('a', 'b', 2) }}", "bba"},
      {"{{ l|first }}{{ l|last }}{{ l|length }}{{ l|count }}", "3344"},
      {"{{ l|join('-') }}", "3-1-2-3"},
      {"{{ l|sort }} {{ l|sort(reverse=true) }}", "[1, 2, 3, 3] [3, 3, 2, 1]"},
      {"{{ l|unique|list }} {{ l|reverse|list }}", "[3, 1, 2] [3, 2, 1, 3]"},
      {"{{ l|sum }} {{ l|min }} {{ l|max }}", "9 1 3"},
      {"{{ d|dictsort }}", "[('A', 3), ('b', 2)]"},
      {"{{ d|items|list }}", "[('b', 2), ('A', 3)]"},
      {"{{ u|map(attribute='n')|join }}", "xy"},
      {"{{ u|selectattr('ok')|map(attribute='n')|list }}", "['x']"},
      {"{{ u|rejectattr('n', 'equalto', 'x')|map(attribute='n')|list }}", "['y']"},
      {"{{ range(6)|select('even')|list }} {{ range(6)|reject('odd')|list }}", "[0, 2, 4] [0, 2, 4]"},
      {"{{ ['a', 'b']|map('upper')|list }}", "['A', 'B']"},
      {"{{ missing|default('d') }} {{ ''|d('e', true) }} {{ none|default('n') }}", "d e None"},
      {"{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ '2.5'|float }} {{ 3|string }}", "42 4 7 2.5 3"},
      {"{{ -3|abs }} {{ 2.5|round }} {{ 2.675|round(2) }} {{ 3.14159|round(2, 'floor') }}",
       "3 2.0 2.67 3.14"},
      {"{{ 'a\\nb'|indent(2, true) }}", "  a\n  b"},
      {"{{ '<&>'|e }}{{ 'x'|safe }}", "&lt;&amp;&gt;x"},
      {"{{ l|list }} {{ 'ab'|list }}", "[3, 1, 2, 3] ['a', 'b']"},
      {"{{ 'abc'|center(7) }}|", "  abc  |"},
  };
  for (const auto& [source, expected] : cases) EXPECT_EQ(Render(source, ctx), expected) << source;
}

TEST(JinjaTest, Tests) {
  const std::pair<const char*, const char*> cases[] = {
      {"{{ x is defined }}{{ x is undefined }}{{ none is none }}", "FalseTrueTrue"},
      {"{{ 's' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}",
       "TrueTrueTrueTrueFalse"},
      {"{{ 1.5 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ 1 is iterable }}",
       "TrueTrueTrueTrueFalse"},
      {"{{ true is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}", "TrueTrueFalseTrue"},
      {"{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}",
       "TrueFalseTrueFalse"},
      {"{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ [1, 2]|select('==', 1)|list }}{{ 2 is gt 1 }}{{ 'a' is in 'ab' "
       "}}",
       "TrueFalse[1]TrueTrue"},
      {"{{ range is callable }}{{ x is not none }}", "TrueTrue"},
  };
  for (const auto& [source, expected] : cases) EXPECT_EQ(Render(source), expected) << source;
}

TEST(JinjaTest, Methods) {
  const json ctx = {{"s", "Hello world!"}, {"d", {{"a", 1}}}};
  const std::pair<const char*, const char*> cases[] = {
      {"{{ s.startswith('He') }}{{ s.endswith(('x', '!')) }}", "TrueTrue"},
      {"{{ s.strip('H!') }}|{{ '\\n x \\n'.lstrip('\\n') }}|{{ 'x  '.rstrip() }}|", "ello world| x \n|x|"},
      {"{{ s.split() }} {{ 'a</think>b'.split('</think>')[-1] }} {{ 'a,b,c'.split(',', 1) }}",
       "['Hello', 'world!'] b ['a', 'b,c']"},
      {"{{ s.upper() }} {{ s.lower() }} {{ 'ab cd'.title() }} {{ s.replace('l', 'L') }}",
       "HELLO WORLD! hello world! Ab Cd HeLLo worLd!"},
      {"{{ s.find('o') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }}", "4 3 a-b"},
      {"{{ '{}+{}'.format(1, 'x') }} {{ '{a:>3}'.format(a=7) }}", "1+x   7"},
      {"{{ d.get('a') }} {{ d.get('z', 0) }} {{ d.get('z') }} {{ d.keys()|list }} {{ d.values()|list }}",
       "1 0 None ['a'] [1]"},
  };
  for (const auto& [source, expected] : cases) EXPECT_EQ(Render(source, ctx), expected) << source;
}

TEST(JinjaTest, ToJsonIsTransformersJsonDumps) {
  const json ctx = {
      {"v", {{"s", "é <b> & 'q' \"d\" \\ \n"}, {"n", {1, 2.5, nullptr, true}}, {"e", json::object()}}}};
  // No HTML escaping, no ASCII escaping, Python's separators, key order kept.
  EXPECT_EQ(Render("{{ v|tojson }}", ctx),
            R"({"s": "é <b> & 'q' \"d\" \\ \n", "n": [1, 2.5, null, true], "e": {}})");
  EXPECT_EQ(Render("{{ v.n|tojson(indent=2) }}", ctx), "[\n  1,\n  2.5,\n  null,\n  true\n]");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': [1, 2]}|tojson(sort_keys=true, separators=(',', ':')) }}"),
            R"({"a":[1,2],"b":1})");
  EXPECT_EQ(Render("{{ 'é🚀'|tojson(ensure_ascii=true) }}"), R"("\u00e9\ud83d\ude80")");
  EXPECT_EQ(Render("{{ [1e-07, 1e22, 100.0] | tojson }}"), "[1e-07, 1e+22, 100.0]");
}

TEST(JinjaTest, Globals) {
  EXPECT_EQ(Render("{{ range(3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1) }} {{ namespace(x=2).x }}"),
            "[0, 1, 2] [5, 3, 1] {'a': 1} 2");
  EXPECT_THAT(Render("{{ strftime_now('%Y') }}"), ::testing::MatchesRegex("[0-9]{4}"));
  // A caller's function, and a context variable shadowing it.
  absl::StatusOr<Template> t = Template::Parse("{{ add(2, b=3) }}");
  ASSERT_THAT(t, IsOk());
  Functions functions = {{"add", [](const json& args, const json& kwargs) -> absl::StatusOr<json> {
                            return args[0].get<int>() + kwargs["b"].get<int>();
                          }}};
  EXPECT_EQ(t->Render(json::object(), functions).value_or("error"), "5");
}

TEST(JinjaTest, UndefinedFailsOnlyWhenUsed) {
  EXPECT_EQ(Render("[{{ x }}{{ x|length }}{{ x|trim }}{{ x is defined }}]"), "[0False]");
  EXPECT_THAT(RenderStatus("{{ x.y }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'x' is undefined")));
  EXPECT_THAT(RenderStatus("{{ d.a.b }}", {{"d", json::object()}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'dict object' has no attribute 'a'")));
  EXPECT_THAT(RenderStatus("{{ x + 1 }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("undefined")));
}

TEST(JinjaTest, ParseErrorsNameTheLine) {
  EXPECT_THAT(
      RenderStatus("line 1\nline 2\n{% if x %}\nnever closed"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("template line 4"), HasSubstr("expected 'elif' or 'else' or 'endif'"))));
  EXPECT_THAT(RenderStatus("a\n{{ 1 + }}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("template line 2"), HasSubstr("unexpected"))));
  EXPECT_THAT(RenderStatus("\n\n{{ x|nosuchfilter }}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("template line 3"), HasSubstr("no filter named 'nosuchfilter'"))));
  EXPECT_THAT(RenderStatus("{% endfor %}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown tag 'endfor'")));
  EXPECT_THAT(RenderStatus("{{ 'unterminated }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unterminated string")));
  EXPECT_THAT(RenderStatus("{% break %}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside of a for loop")));
}

TEST(JinjaTest, RuntimeErrorsNameTheLine) {
  EXPECT_THAT(RenderStatus("ok\n{{ 'a' + 1 }}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("template line 2: can only concatenate str (not \"int\") to str")));
  EXPECT_THAT(RenderStatus("{% set l = [] %}{{ l.append(1) }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'append' of 'list' object is unsafe")));
  EXPECT_THAT(RenderStatus("{% for x in none %}{% endfor %}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'NoneType' object is not iterable")));
}

TEST(JinjaTest, RaiseExceptionMessageSurfacesAsIs) {
  EXPECT_THAT(
      RenderStatus("text\n{{ raise_exception('Roles must alternate: ' ~ role) }}", {{"role", "tool"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Eq("Roles must alternate: tool")));
  // Also from inside a macro.
  EXPECT_THAT(RenderStatus("{% macro m() %}{{ raise_exception('inner') }}{% endmacro %}{{ m() }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Eq("inner")));
}

TEST(JinjaTest, RunawayTemplatesAreCapped) {
  Options options = Options::HuggingFace();
  options.limits.max_loop_iterations = 10000;
  EXPECT_THAT(RenderStatus("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                           json::object(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("loop iterations")));
  EXPECT_THAT(RenderStatus("{{ range(1000000)|length }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Range too big")));
  EXPECT_THAT(RenderStatus("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("calls deep")));
  options.limits.max_output_bytes = 1000;
  EXPECT_THAT(RenderStatus("{% for i in range(100) %}0123456789abcdef{% endfor %}", json::object(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exceeds the limit")));
  EXPECT_THAT(RenderStatus("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s * 2 %}"
                           "{% endfor %}",
                           json::object(), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_THAT(RenderStatus("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested too deeply")));
}

TEST(JinjaTest, NestingIsCapped) {
  // Deeply nested request data and values a template nests in a loop would
  // otherwise overflow the stack when printed or freed.
  json deep = 1;
  for (int i = 0; i < 600; ++i) deep = json::array({deep});
  EXPECT_THAT(RenderStatus("{{ x }}", {{"x", deep}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("context nested more than 512 levels")));
  EXPECT_THAT(RenderStatus("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
                           "{% endfor %}"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested more than 512 levels")));
  // A namespace holding itself prints as Python prints it.
  EXPECT_EQ(Render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
}

}  // namespace
}  // namespace shardlm::jinja
