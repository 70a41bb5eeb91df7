// Small UTF-8 helpers shared by the tokenizer and the chat template (internal header).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace eg::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Length of the UTF-8 sequence announced by `lead` (1 for ASCII, continuation or invalid bytes).
inline size_t seq_len(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

/// Result of examining the bytes at the start of `s` as one UTF-8 character (strict rules:
/// no overlongs, no surrogates, nothing above U+10FFFF — the rules of Rust's String::from_utf8).
enum class CharStatus { kValid, kIncomplete, kInvalid };

/// On kValid, *len is the character's byte length. kIncomplete: `s` is a proper prefix of a
/// valid character. kInvalid: the first byte cannot start a valid character given what follows.
inline CharStatus check_char(std::string_view s, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) {
    *len = 1;
    return CharStatus::kValid;
  }
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return CharStatus::kInvalid;
  }
  for (size_t i = 1; i < n; ++i) {
    if (i >= s.size()) return CharStatus::kIncomplete;
    const auto b = static_cast<unsigned char>(s[i]);
    const unsigned char l = (i == 1) ? lo : 0x80, h = (i == 1) ? hi : 0xBF;
    if (b < l || b > h) return CharStatus::kInvalid;
  }
  *len = n;
  return CharStatus::kValid;
}

inline bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (check_char(s.substr(i), &len) != CharStatus::kValid) return false;
    i += len;
  }
  return true;
}

/// Decodes the code point at s[pos] leniently (an invalid byte decodes as itself, length 1).
inline uint32_t decode_at(std::string_view s, size_t pos, size_t* len) {
  size_t n = 0;
  if (check_char(s.substr(pos), &n) != CharStatus::kValid) {
    *len = 1;
    return static_cast<unsigned char>(s[pos]);
  }
  *len = n;
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (n == 1) return b0;
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  return cp;
}

/// Python's str.isspace() (what Jinja's `trim` filter strips).
inline bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

/// Rust's char::is_whitespace (Unicode White_Space), used by HF's lstrip/rstrip of added tokens.
inline bool is_rust_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace eg::utf8
