#include "coordinator/serving/serving_core.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace shardlm {
namespace {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status ServingCore::AdmitKey(const std::string* authorization, absl::string_view carrier,
                                   std::string* owner) const {
  if (draining_.load()) return absl::UnavailableError("server is shutting down");
  if (api_keys_.empty()) return absl::OkStatus();
  const std::string value = authorization == nullptr ? "" : *authorization;
  // The scheme is case-insensitive and may be followed by more than one space (RFC 7235).
  constexpr absl::string_view kBearer = "bearer ";
  if (absl::StartsWithIgnoreCase(value, kBearer)) {
    const std::string key(absl::StripLeadingAsciiWhitespace(absl::string_view(value).substr(kBearer.size())));
    bool match = false;
    for (const std::string& k : api_keys_) match |= ConstantTimeEquals(k, key);
    if (match) {
      *owner = key;
      return absl::OkStatus();
    }
  }
  return absl::UnauthenticatedError(
      authorization == nullptr
          ? absl::StrCat("missing API key: send the ", carrier, " 'authorization: Bearer <key>'")
          : "invalid API key in 'authorization' (expected 'Bearer <key>')");
}

absl::StatusOr<std::vector<int32_t>> ServingCore::EncodeForCall(const std::string& text,
                                                                bool add_special_tokens,
                                                                const std::string& field,
                                                                const CallRecord& call) const {
  return EncodeField(*tokenizer_, text, add_special_tokens, loop_->config().max_position_embeddings, field,
                     [&call] { return call.Abandoned(); });
}

absl::StatusOr<std::shared_ptr<const Matcher>> ServingCore::CompileConstraint(
    const ConstraintSpec& spec) const {
  if (spec.empty()) return nullptr;
  const std::string field = absl::StrCat("constraint.", std::string(KindName(spec.kind)));
  if (tokenizer_ == nullptr) {
    return InvalidField(field, "needs the model's tokenizer.json (a constraint is compiled against it)");
  }
  std::call_once(compiler_once_, [this] {
    const auto& eos = loop_->config().eos_token_ids;
    auto compiler = ConstraintCompiler::Create(*tokenizer_, std::vector<int32_t>(eos.begin(), eos.end()));
    if (compiler.ok()) {
      compiler_ = *std::move(compiler);
    } else {
      compiler_status_ = compiler.status();
    }
  });
  if (!compiler_) {
    return WithField(
        absl::FailedPreconditionError(absl::StrCat(
            field, ": constraints are unavailable for this tokenizer: ", compiler_status_.message())),
        field);
  }
  auto matcher = compiler_->Compile(spec);
  if (!matcher.ok()) return WithField(matcher.status(), field);
  return std::shared_ptr<const Matcher>(*std::move(matcher));
}

}  // namespace shardlm
