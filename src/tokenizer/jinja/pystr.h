// Python string semantics the Jinja interpreter needs, on UTF-8 std::strings: code-point
// lengths/indexes, str.strip/split/replace/upper/lower, repr() of str and float, and JSON string
// escaping as json.dumps writes it. Invalid UTF-8 bytes are treated as one code point each.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace eg::jinja::py {

std::u32string decode(std::string_view s);
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
/// len(s): number of code points.
size_t length(std::string_view s);

/// str.isspace() of one character.
bool is_space(char32_t c);

/// str.strip / lstrip / rstrip; chars = nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split(sep, maxsplit) (sep = nullopt: runs of whitespace). Throws eg::Error on an empty sep.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
/// str.replace(old, new, count) (count < 0: all).
std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
/// str.upper() / str.lower() / str.capitalize(). Cased letters are handled in ASCII, Latin-1,
/// Latin Extended-A, Greek, Cyrillic and fullwidth Latin; other cased scripts throw eg::Error
/// (unsupported) rather than being left unchanged.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);

/// repr(str): quotes and escapes as Python does.
std::string repr(std::string_view s);
/// repr(float): the shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16.
std::string float_repr(double d);
/// A JSON string literal as json.dumps writes it (ensure_ascii: non-ASCII as \uXXXX).
std::string json_quote(std::string_view s, bool ensure_ascii);

}  // namespace eg::jinja::py
