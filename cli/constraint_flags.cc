#include "cli/constraint_flags.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "common/status.h"
#include "constraints/constraint_compiler.h"

namespace shardlm {
namespace {

using ConstraintKind = ConstraintSpec::Kind;

// A flag's file, its errors named by the flag (InvalidArgument: exit 2).
absl::StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", text.status().message()));
  return text;
}

}  // namespace

std::string ConstraintFlag(ConstraintKind kind) {
  // The batch key (the gRPC field) with dashes: json_schema -> --json-schema.
  if (kind == ConstraintKind::kNone) return "";
  return "--" + absl::StrReplaceAll(std::string(KindName(kind)), {{"_", "-"}});
}

void AddConstraintFlags(FlagSet& f, ConstraintFlags* out) {
  f.String("json-schema", "constrain the output to this JSON Schema (a file)").To(&out->json_schema);
  f.Bool("json-object", "constrain the output to a JSON object").To(&out->json_object);
  f.String("regex", "constrain the output to this regular expression (Rust regex syntax)").To(&out->regex);
  f.String("grammar", "constrain the output to this Lark grammar (a file; llguidance's syntax)")
      .To(&out->grammar);
  f.String("choice", "constrain the output to one of these strings (a JSON list, or comma-separated)")
      .To(&out->choice);
}

absl::StatusOr<ConstraintSpec> ConstraintFromFlags(const ConstraintFlags& f) {
  ConstraintSpec spec;
  const int given = f.json_schema.has_value() + f.json_object + f.regex.has_value() + f.grammar.has_value() +
                    f.choice.has_value();
  if (given > 1) {
    return absl::InvalidArgumentError(
        "give at most one of --json-schema, --json-object, --regex, --grammar and --choice");
  }
  if (f.json_schema) {
    spec.kind = ConstraintKind::kJsonSchema;
    SHARDLM_ASSIGN_OR_RETURN(spec.text, ReadFlagFile("--json-schema", *f.json_schema));
    if (!nlohmann::json::accept(spec.text)) {
      return absl::InvalidArgumentError(absl::StrCat("--json-schema: ", *f.json_schema, " is not JSON"));
    }
  } else if (f.json_object) {
    spec.kind = ConstraintKind::kJsonObject;
  } else if (f.regex) {
    spec.kind = ConstraintKind::kRegex;
    spec.text = *f.regex;
  } else if (f.grammar) {
    spec.kind = ConstraintKind::kGrammar;
    SHARDLM_ASSIGN_OR_RETURN(spec.text, ReadFlagFile("--grammar", *f.grammar));
  } else if (f.choice) {
    spec.kind = ConstraintKind::kChoice;
    const std::string& text = *f.choice;
    const nlohmann::json list = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (list.is_array()) {
      for (const auto& c : list) {
        if (!c.is_string()) return absl::InvalidArgumentError("--choice: a JSON list must hold strings only");
        spec.choices.push_back(c.get<std::string>());
      }
    } else {
      spec.choices = absl::StrSplit(text, ',');
    }
    if (spec.choices.empty()) return absl::InvalidArgumentError("--choice: no strings given");
  }
  return spec;
}

absl::StatusOr<std::shared_ptr<const Matcher>> CompileForModel(LocalModel& model, const ConstraintSpec& spec,
                                                               const std::string& field) {
  if (spec.empty()) return nullptr;
  if (model.tokenizer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a constraint needs the model's tokenizer.json"));
  }
  if (model.compiler == nullptr) {
    const auto& eos = model.engine->config().eos_token_ids;
    SHARDLM_ASSIGN_OR_RETURN(
        model.compiler,
        ConstraintCompiler::Create(*model.tokenizer, std::vector<int32_t>(eos.begin(), eos.end())));
  }
  absl::StatusOr<std::unique_ptr<Matcher>> matcher = model.compiler->Compile(spec);
  if (!matcher.ok()) {
    // The compiler names the gRPC field; here the flag or key is what the user wrote.
    std::string message(matcher.status().message());
    const std::string grpc_field = absl::StrCat("constraint.", std::string(KindName(spec.kind)), ": ");
    if (message.rfind(grpc_field, 0) == 0) message = message.substr(grpc_field.size());
    return absl::Status(matcher.status().code(), absl::StrCat(field, ": ", message));
  }
  return std::shared_ptr<const Matcher>(*std::move(matcher));
}

}  // namespace shardlm
