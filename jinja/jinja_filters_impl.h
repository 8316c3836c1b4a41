// The filter table's two halves share these (jinja_filters.cc: the table and
// the filters over sequences and mappings; jinja_text_filters.cc: the filters
// over strings and numbers). Nothing else includes it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jinja/jinja_builtins.h"
#include "jinja/jinja_value.h"

namespace shardlm::jinja::filters {

using FilterFn = absl::StatusOr<Value> (*)(const Value& in, const CallArgs& args, const Limits& limits);

absl::Status FilterError(const std::string& message);
// InvalidArgument when `s` is over the template's output limit.
absl::Status CheckSize(const std::string& s, const Limits& limits);

// A filter that maps a string through `fn` (lower, upper, capitalize, title).
absl::StatusOr<Value> StringFilter(const Value& in, const CallArgs& args, const char* name,
                                   std::string (*fn)(std::string_view));
// The filters over strings and numbers, as Jinja2 names them (FAbs is "abs").
absl::StatusOr<Value> FAbs(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FCenter(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FEscape(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FFloat(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FFormat(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FIndent(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FInt(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FReplace(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FRound(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FSafe(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FString(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FToJson(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FTrim(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FTruncate(const Value& in, const CallArgs& args, const Limits& limits);
absl::StatusOr<Value> FWordcount(const Value& in, const CallArgs& args, const Limits& limits);

}  // namespace shardlm::jinja::filters
