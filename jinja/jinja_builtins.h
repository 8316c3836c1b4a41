// Jinja's built-in filters (`x | trim`), tests (`x is defined`) and global
// functions (range, namespace, dict, strftime_now), with the semantics of
// Jinja2 3.1 as transformers configures it: `tojson` is transformers' own
// (json.dumps without HTML escaping, with ensure_ascii / indent / separators /
// sort_keys), not Jinja's.
//
// Filters that would return a Python generator (map, select, reverse, ...)
// return a list here; a template can only tell the difference by printing the
// generator object itself.
//
// Not provided (a template using one fails to parse, naming it): groupby,
// slice, random, pprint, filesizeformat, striptags, urlencode, urlize,
// wordwrap, xmlattr.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "jinja/jinja_value.h"

namespace shardlm::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, const CallArgs& args,
                                  const Limits& limits);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args);

// The global function `name` (range, namespace, dict, strftime_now), or
// Undefined.
Value BuiltinGlobal(const std::string& name);

}  // namespace shardlm::jinja
