#include "coordinator/openai/openai_params.h"

#include "coordinator/serving/request_limits.h"

namespace shardlm {
namespace openai {

bool SetLength(Params& p, const ModelContext& model, const std::string& param, int64_t default_tokens,
               const std::string& prompt_param, EngineRequest& g) {
  const int64_t prompt = static_cast<int64_t>(g.prompt.size());
  if (prompt == 0) return p.Fail(prompt_param, prompt_param + " must not be empty");
  if (prompt >= model.max_context) {
    return p.Fail(prompt_param, absl::StrCat("The prompt is ", prompt, " tokens; this model's context holds ",
                                             model.max_context, " (prompt plus completion)"));
  }
  int64_t max_tokens = default_tokens < 0 ? model.max_context - prompt : default_tokens;
  if (!p.Integer(param, 0, model.max_context, &max_tokens)) return false;
  if (prompt + max_tokens > model.max_context) {
    return p.Fail(param, absl::StrCat("This model's context holds ", model.max_context, " tokens, but ",
                                      prompt, " prompt tokens plus ", param, "=", max_tokens, " is ",
                                      prompt + max_tokens, "; lower ", param, " or shorten the prompt"));
  }
  g.max_new_tokens = static_cast<int32_t>(max_tokens);
  return true;
}

}  // namespace openai
}  // namespace shardlm
