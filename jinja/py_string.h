// Python `str` semantics on UTF-8 text, for the Jinja engine (jinja/jinja.h).
//
// Chat templates index, slice, strip and split strings exactly as Python does:
// by code point, with Python's idea of whitespace and line breaks. Strings stay
// UTF-8 in std::string; these helpers decode only when a position matters.
//
//   py::Strip("\u3000 hi \n", std::nullopt, true, true)   -> "hi"
//   py::Split("a  b", std::nullopt, -1)                    -> {"a", "b"}
//   py::Repr("it's")                                       -> "\"it's\""
//   py::FloatRepr(1e16)                                    -> "1e+16"
//
// Case mapping covers ASCII, Latin-1, Greek and Cyrillic; other scripts are
// left as they are (Python maps all of Unicode).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::jinja::py {

// Code points of UTF-8 text; an invalid byte decodes as U+FFFD.
std::u32string Decode(std::string_view text);
// The code point at text[*pos] (*pos < text.size()); advances *pos past it.
char32_t NextCodePoint(std::string_view text, size_t* pos);
void AppendUtf8(char32_t cp, std::string* out);
std::string Encode(std::u32string_view cps);
bool IsAscii(std::string_view text);
bool IsValidUtf8(std::string_view text);
// len(s).
int64_t Length(std::string_view text);

// str.isspace() for one code point.
bool IsSpace(char32_t c);
// Line boundaries of str.splitlines().
bool IsLineBreak(char32_t c);

// Python slice bounds: the code-point (or element) indices that
// seq[start:stop:step] selects from a sequence of `length` items. `step` != 0.
std::vector<int64_t> SliceIndices(int64_t length, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  int64_t step);
// Normalizes one index the way str.find's start/end arguments are.
int64_t ClampIndex(int64_t index, int64_t length);

// strip / lstrip / rstrip; `chars` nullopt means whitespace.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit; `sep` nullopt splits on whitespace runs.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> SplitLines(std::string_view s, bool keepends);
// str.replace; count < 0 replaces all.
std::string Replace(std::string_view s, std::string_view old_text, std::string_view new_text, int64_t count);
// str.find / str.rfind over s[start:end] (code-point indices, already clamped);
// returns a code-point index or -1.
int64_t Find(std::string_view s, std::string_view sub, int64_t start, int64_t end, bool reverse);
// str.count over the whole string.
int64_t Count(std::string_view s, std::string_view sub);

// Case mappings are Unicode's full ones, language-insensitive, as Python's
// (ICU with the root locale: 'ß'.upper() == "SS", a final sigma lowers to 'ς').
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
// str.swapcase.
std::string SwapCase(std::string_view s);
// str.capitalize: first character titlecased, the rest lowercased.
std::string Capitalize(std::string_view s);
// str.title: a character after an uncased one is titlecased, others lowercased.
std::string Title(std::string_view s);
// Jinja's `title` filter: words begin after '-', whitespace, '(', '{', '[', '<'.
std::string JinjaTitle(std::string_view s);
bool IsAlpha(char32_t c);
bool IsDigit(char32_t c);
bool IsLowerCased(char32_t c);
bool IsUpperCased(char32_t c);

// repr(str): quotes and escapes as CPython prints them.
std::string Repr(std::string_view s);
// repr(float): the shortest text that reads back as the same double.
std::string FloatRepr(double v);

}  // namespace shardlm::jinja::py
