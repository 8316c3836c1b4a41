// Python's str.format for the template engine (`"{:>10}".format(x)`,
// `"{0[name]!r}".format(d)`): automatic and manual field numbers, keyword
// fields, `.attr` and `[key]` accessors, the !r/!s/!a conversions, and the
// format-spec mini-language ([[fill]align][sign][0][width][.precision][type],
// types s, d, x, X, o, b, f, F, e, E, g, G, %). Errors carry CPython's
// messages ("Single '}' encountered in format string", ...).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "jinja/jinja_value.h"

namespace shardlm::jinja {

absl::StatusOr<std::string> PyFormat(const std::string& fmt, const CallArgs& args);

// `s` padded with `fill` to `width` characters, aligned '<' (left), '>'
// (right) or '^' (centred, the extra one on the right), as str.format and
// str.ljust/rjust/center pad.
std::string PadTo(const std::string& s, int64_t width, char32_t fill, char align);

}  // namespace shardlm::jinja
