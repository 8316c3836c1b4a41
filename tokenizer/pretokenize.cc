#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "absl/strings/str_cat.h"

namespace shardlm {

struct SplitRegex {
  pcre2_code* code = nullptr;
  ~SplitRegex() { pcre2_code_free(code); }
};

absl::StatusOr<std::shared_ptr<SplitRegex>> CompileRegex(const std::string& pattern,
                                                         const std::string& label) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  auto re = std::make_shared<SplitRegex>();
  re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                           PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (re->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return absl::InvalidArgumentError(absl::StrCat(label, ": pre-tokenizer regex does not compile at offset ",
                                                   offset, ": ", reinterpret_cast<char*>(msg)));
  }
  pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // best effort; falls back to the interpreter
  return re;
}

void SplitByRegex(const SplitRegex& re, std::string_view text, bool remove_matches,
                  std::vector<std::string>* out) {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
  size_t pos = 0, gap_start = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                         PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: step one code point
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (b > gap_start) out->emplace_back(text.substr(gap_start, b - gap_start));
    if (!remove_matches) out->emplace_back(text.substr(b, e - b));
    gap_start = pos = e;
  }
  if (gap_start < text.size()) out->emplace_back(text.substr(gap_start));
  pcre2_match_data_free(md);
}

absl::StatusOr<std::string> Normalize(NormKind kind, const std::string& text) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* norm =
      kind == NormKind::kNfc ? unorm2_getNFCInstance(&err) : unorm2_getNFKCInstance(&err);
  if (U_FAILURE(err)) return absl::InternalError("ICU normalizer unavailable");
  std::u16string src(text.size() + 1, u'\0');
  int32_t src_len = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(src.data()), static_cast<int32_t>(src.size()), &src_len, text.data(),
                static_cast<int32_t>(text.size()), &err);
  if (U_FAILURE(err)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::u16string dst(static_cast<size_t>(src_len) * 3 + 16, u'\0');
  int32_t dst_len =
      unorm2_normalize(norm, reinterpret_cast<const UChar*>(src.data()), src_len,
                       reinterpret_cast<UChar*>(dst.data()), static_cast<int32_t>(dst.size()), &err);
  if (U_FAILURE(err)) return absl::InternalError("ICU normalization failed");
  std::string out(static_cast<size_t>(dst_len) * 3 + 4, '\0');
  int32_t out_len = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len,
              reinterpret_cast<const UChar*>(dst.data()), dst_len, &err);
  if (U_FAILURE(err)) return absl::InternalError("ICU UTF-8 conversion failed");
  out.resize(out_len);
  return out;
}

}  // namespace shardlm
