// UTF-8 helpers shared by the tokenizer and the streaming detokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardlm {

// Decodes `bytes` as UTF-8 into `out`, replacing each maximal invalid subpart
// with U+FFFD (the Unicode-recommended policy, as Python's "replace"). When
// `final` is false, an incomplete but so-far valid sequence at the end is left
// unconsumed. Returns the number of bytes consumed. Feeding a byte stream in
// pieces (keeping the unconsumed tail) gives the same text as decoding it whole.
size_t DecodeUtf8Lossy(std::string_view bytes, bool final, std::string* out);

// Decodes the code point at text[*pos] and advances *pos past it; an invalid
// or truncated sequence gives U+FFFD and advances past its maximal subpart
// (the same policy as DecodeUtf8Lossy). *pos < text.size().
char32_t NextCodePoint(std::string_view text, size_t* pos);

// `text` as code points (NextCodePoint's policy for invalid bytes).
std::u32string DecodeUtf32(std::string_view text);

// True when `s` is entirely valid UTF-8.
bool IsValidUtf8(std::string_view s);

// The number of characters (code points) in UTF-8 `s`: its bytes that do not
// continue a sequence.
int64_t Utf8Length(std::string_view s);

// Appends the UTF-8 encoding of `cp`.
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace shardlm
