// A Jinja2 template engine for the subset of Jinja that model chat templates
// use, rendering byte for byte as Python Jinja2 3.1 does in the sandboxed
// environment transformers' apply_chat_template sets up.
//
//   SHARDLM_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::Parse(
//       "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}",
//       jinja::Options::HuggingFace()));
//   SHARDLM_ASSIGN_OR_RETURN(std::string text, t.Render(
//       {{"messages", {{{"role", "user"}, {"content", " hi "}}}}}));
//   // text == "<|user|>hi\n"
//
// Supported: `{{ }}`, `{% %}`, `{# #}`, `{% raw %}`, whitespace control
// (`-`, `+`, trim_blocks, lstrip_blocks); if/elif/else, for (with `loop`,
// unpacking, an `if` filter, else, break/continue), set (also `ns.attr` and
// block form), macro, call blocks, filter blocks, with, generation; Python expressions,
// literals, slicing, calls with keyword arguments, filters and tests
// (jinja/jinja_builtins.h), str/dict/list methods (jinja/jinja_methods.h); the
// globals range, namespace, dict, raise_exception and strftime_now.
// Not supported: template inheritance and includes, recursive loops.
//
// Values print as Python prints them (True, None, 1.0, ['a', 1]); a variable
// that does not exist is Undefined (prints as "", falsy, `is defined` false)
// and fails only when used as a value (`x.y`, `x + 1`, `x()`).
//
// Errors are InvalidArgument. Syntax and runtime errors start with
// "template line N: "; raise_exception("msg") fails with exactly "msg".
// Options::limits caps loop iterations, output size, nesting and macro
// recursion, so a runaway template fails instead of hanging the server.
//
// A Template is immutable once parsed: Render may run on many threads at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/jinja_value.h"
#include "nlohmann/json.hpp"

namespace shardlm::jinja {

struct Options {
  // Drop the first newline after a block tag (`%}`) or comment.
  bool trim_blocks = false;
  // Strip the blanks between a line start and a block tag or comment.
  bool lstrip_blocks = false;
  // Keep a single newline at the very end of the template.
  bool keep_trailing_newline = false;
  Limits limits;

  // As transformers' apply_chat_template: trim_blocks and lstrip_blocks.
  static Options HuggingFace();
};

// A function a template may call, taking its positional arguments as a JSON
// array and its keyword arguments as a JSON object.
using Function = std::function<absl::StatusOr<nlohmann::ordered_json>(const nlohmann::ordered_json& args,
                                                                      const nlohmann::ordered_json& kwargs)>;
using Functions = std::map<std::string, Function>;

class Template {
 public:
  // InvalidArgument "template line N: ..." on a syntax error or an unknown
  // filter or test.
  static absl::StatusOr<Template> Parse(std::string_view source, const Options& options = {});

  // `context` is a JSON object whose keys are the template's variables (key
  // order is kept, as Python dicts keep it). `functions` are further globals;
  // a context variable of the same name wins, as in Jinja.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const Functions& functions = {}) const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace shardlm::jinja
