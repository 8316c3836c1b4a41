// Responses API objects (types/responses/response.py of the official client):
// a response from its row and output items, and its usage.
#pragma once

#include <string>
#include <vector>

#include "coordinator/openai_wire/api_error.h"
#include "coordinator/serving/generate_update.h"
#include "state/rows.h"

namespace shardlm {
namespace stateful {

using openai::Json;

// Every field of Response; the config's (model, instructions, sampling, text, ...) echoed.
Json ResponseObject(const ResponseRow& row, const Json& output);
// {input_tokens, input_tokens_details: {cached_tokens, cache_write_tokens}, output_tokens, ...}
Json ResponseUsage(const GenerateUsage& usage);
// The assistant's reply as an output message item.
Json OutputMessage(const std::string& id, const std::string& status, const std::string& text);

}  // namespace stateful
}  // namespace shardlm
