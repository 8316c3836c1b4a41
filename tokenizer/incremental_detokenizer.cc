#include "tokenizer/incremental_detokenizer.h"

#include "common/utf8.h"

namespace shardlm {

std::string IncrementalDetokenizer::Append(int32_t id) {
  pending_ += tokenizer_.TokenBytes(id, skip_special_);
  std::string out;
  const size_t used = DecodeUtf8Lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out;
  DecodeUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace shardlm
