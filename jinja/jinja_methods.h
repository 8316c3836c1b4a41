// The methods of str, dict, list and tuple that chat templates call:
// `s.startswith(x)`, `s.split('</think>')[-1].lstrip('\n')`, `d.items()`,
// `d.get(k, default)`, `l.index(x)`, ... (see the tables in jinja_methods.cc).
//
// Methods that would mutate a list or dict (append, pop, update, ...) are
// looked up as an Undefined that fails when called, as in Jinja2's
// ImmutableSandboxedEnvironment, which transformers uses.
#pragma once

#include <optional>
#include <string>

#include "jinja/jinja_value.h"

namespace shardlm::jinja {

// self.name as a callable bound to self; nullopt when the type has no such
// method.
std::optional<Value> BoundMethod(const Value& self, const std::string& name);

}  // namespace shardlm::jinja
