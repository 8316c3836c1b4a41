#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"
#include "common/utf8.h"
#include "formats/gguf.h"
#include "formats/model_files.h"
#include "nlohmann/json.hpp"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"

namespace shardlm {
namespace bpe {
namespace {

// How often a long encoding asks whether to stop: every this many bytes of
// pieces, and every this many merges inside one piece (a few ms of work each).
constexpr size_t kBytesPerStopCheck = 4096;
constexpr int64_t kMergesPerStopCheck = 1 << 14;

absl::Status Stopped() {
  return absl::CancelledError("tokenizing stopped: the request was cancelled or its deadline passed");
}

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

absl::Status BpeTokenizer::MergeSymbols(std::vector<int32_t>& syms, const StopCheck& stop) const {
  const int32_t n = static_cast<int32_t>(syms.size());
  if (n < 2) return absl::OkStatus();
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // A candidate: merging the symbol at `pos` with its right neighbour, valid
  // while those two are still `left` and `right`.
  struct Candidate {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(syms[pos], syms[next[pos]]));
    if (it != merges_.end())
      heap.push({it->second.first, pos, syms[pos], syms[next[pos]], it->second.second});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  int64_t popped = 0;
  while (!heap.empty()) {
    if (++popped % kMergesPerStopCheck == 0 && stop && stop()) return Stopped();
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.pos];
    if (syms[c.pos] != c.left || right < 0 || syms[right] != c.right) continue;  // stale
    syms[c.pos] = c.merged;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    syms[right] = -1;  // removed
    push(prev[c.pos]);
    push(c.pos);
  }
  int32_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) syms[kept++] = syms[i];
  syms.resize(kept);
  return absl::OkStatus();
}

absl::Status BpeTokenizer::EncodeOrdinary(const std::string& raw, std::vector<int32_t>* ids,
                                          const StopCheck& stop) const {
  std::string text = raw;
  for (const NormStep& n : normalizers_) {
    if (n.kind == NormStep::kReplace) {
      text = absl::StrReplaceAll(text, {{n.pattern, n.content}});
    } else if (n.kind == NormStep::kPrepend) {
      if (!text.empty()) text = n.content + text;
    } else {
      SHARDLM_ASSIGN_OR_RETURN(text, Normalize(n.unicode, text));
    }
  }
  std::vector<std::string> pieces = {text};
  bool byte_level = false;
  for (const PreTokStep& step : pretok_) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.kind == PreTokStep::kByteLevel && step.add_prefix_space && &piece == &pieces.front() &&
          (piece.empty() || piece[0] != ' ')) {
        piece.insert(piece.begin(), ' ');
      }
      if (step.regex) {
        SplitByRegex(*step.regex, piece, step.remove_matches, &next);
      } else {
        next.push_back(std::move(piece));
      }
    }
    pieces = std::move(next);
    if (step.kind == PreTokStep::kByteLevel) byte_level = true;
  }
  if (stop && stop()) return Stopped();
  const ByteLevelTable& table = ByteLevelTable::Get();
  size_t since_check = 0;
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    // Between pieces: a check every few KB of text.
    since_check += piece.size();
    if (since_check >= kBytesPerStopCheck) {
      since_check = 0;
      if (stop && stop()) return Stopped();
    }
    if (!byte_level) {
      SHARDLM_RETURN_IF_ERROR(Bpe(piece, ids, stop));
      continue;
    }
    std::string spelled;
    for (unsigned char b : piece) spelled += table.Encode(b);
    SHARDLM_RETURN_IF_ERROR(Bpe(spelled, ids, stop));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(const std::string& text, bool add_special,
                                                          const StopCheck& stop) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::vector<int32_t> ids;
  if (add_special) ids = prefix_ids_;
  // Cut added tokens out first (leftmost, longest), honouring lstrip/rstrip.
  size_t seg_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    auto bucket = added_by_first_byte_.find(static_cast<unsigned char>(text[i]));
    if (bucket != added_by_first_byte_.end()) {
      for (size_t idx : bucket->second) {
        if (text.compare(i, added_[idx].content.size(), added_[idx].content) == 0) {
          hit = &added_[idx];
          break;
        }
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip) {
      while (seg_end > seg_start && IsAsciiSpace(text[seg_end - 1])) --seg_end;
    }
    if (seg_end > seg_start)
      SHARDLM_RETURN_IF_ERROR(EncodeOrdinary(text.substr(seg_start, seg_end - seg_start), &ids, stop));
    ids.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && IsAsciiSpace(text[i])) ++i;
    }
    seg_start = i;
  }
  if (seg_start < text.size()) SHARDLM_RETURN_IF_ERROR(EncodeOrdinary(text.substr(seg_start), &ids, stop));
  if (add_special) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

const std::string& BpeTokenizer::TokenBytes(int32_t id, bool skip_special) const {
  static const std::string* empty = new std::string();
  if (id < 0 || static_cast<size_t>(id) >= token_bytes_.size()) return *empty;
  if (skip_special && special_ids_.count(id)) return *empty;
  return token_bytes_[id];
}

std::string BpeTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) bytes += TokenBytes(id, skip_special);
  std::string text;
  DecodeUtf8Lossy(bytes, /*final=*/true, &text);
  return text;
}

}  // namespace bpe

absl::Status CheckTextFits(const Tokenizer& tokenizer, size_t text_bytes, int64_t max_tokens,
                           const std::string& field) {
  const int64_t limit = max_tokens * tokenizer.MaxTokenBytes() * 4;
  if (max_tokens <= 0 || static_cast<int64_t>(text_bytes) <= limit) return absl::OkStatus();
  return WithField(
      absl::InvalidArgumentError(absl::StrCat(
          field, " is ", text_bytes, " bytes; more than ", limit, " bytes cannot fit the model's context of ",
          max_tokens, " tokens (its longest token is ", tokenizer.MaxTokenBytes(), " bytes)")),
      field);
}

absl::StatusOr<std::vector<int32_t>> EncodeField(const Tokenizer& tokenizer, const std::string& text,
                                                 bool add_special_tokens, int64_t max_tokens,
                                                 const std::string& field, const Tokenizer::StopCheck& stop) {
  SHARDLM_RETURN_IF_ERROR(CheckTextFits(tokenizer, text.size(), max_tokens, field));
  auto ids = tokenizer.Encode(text, add_special_tokens, stop);
  if (!ids.ok()) {
    return WithField(absl::Status(ids.status().code(), absl::StrCat(field, ": ", ids.status().message())),
                     field);
  }
  return ids;
}

}  // namespace shardlm
