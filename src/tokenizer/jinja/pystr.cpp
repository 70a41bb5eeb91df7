// Python string semantics on UTF-8 (see pystr.h).
#include "tokenizer/jinja/pystr.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/value.h"
#include "tokenizer/utf8.h"

namespace eg::jinja::py {

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    out.push_back(utf8::decode_at(s, i, &len));
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len = 0;
    utf8::decode_at(s, i, &len);
    i += len;
  }
  return n;
}

bool is_space(char32_t c) { return utf8::is_python_space(c); }

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw ValueError("str.split(): empty separator", false);
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t k = s.find(*sep, pos);
      if (k == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, k - pos));
      pos = k + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string u = decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {  // the rest, trailing space kept
      out.push_back(encode(std::u32string_view(u).substr(i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_space(u[j])) ++j;
    out.push_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    const std::u32string u = decode(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t k = s.find(old, pos);
    if (k == std::string_view::npos) break;
    out += s.substr(pos, k - pos);
    out += repl;
    pos = k + old.size();
    ++n;
  }
  out += s.substr(pos);
  return out;
}

// ---- case mapping --------------------------------------------------------------------------

namespace {

// Cased characters of scripts this table does not map: they make upper/lower throw.
bool unsupported_cased(char32_t c) {
  static constexpr std::pair<char32_t, char32_t> kRanges[] = {
      {0x0180, 0x02AF},   {0x0345, 0x0345},   {0x0370, 0x0373},   {0x0376, 0x037F},   {0x0390, 0x0390},
      {0x03B0, 0x03B0},   {0x03CF, 0x03FF},   {0x0531, 0x0587},   {0x10A0, 0x10FF},   {0x13A0, 0x13FF},
      {0x1C80, 0x1CBF},   {0x1D79, 0x1D8E},   {0x1E00, 0x1FFF},   {0x2126, 0x2132},   {0x214E, 0x214E},
      {0x2160, 0x2184},   {0x24B6, 0x24E9},   {0x2C00, 0x2D2F},   {0xA640, 0xA69F},   {0xA722, 0xA7FF},
      {0xAB53, 0xAB53},   {0xAB70, 0xABBF},   {0xFB00, 0xFB17},   {0x10400, 0x104FF}, {0x10570, 0x105BF},
      {0x10C80, 0x10CFF}, {0x118A0, 0x118DF}, {0x16E40, 0x16E7F}, {0x1E900, 0x1E94B},
  };
  for (const auto& [lo, hi] : kRanges)
    if (c >= lo && c <= hi) return true;
  return false;
}

[[noreturn]] void unsupported_case(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
  throw ValueError(std::string("upper/lower of ") + buf, true);
}

// Pairs laid out upper, lower, upper, lower...: even_upper tells which parity is upper.
bool in_pairs(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// Appends the upper-case form of c.
void to_upper(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'a' && c <= 'z' ? c - 32 : c);
    return;
  }
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) || (c >= 0x430 && c <= 0x44F) ||
      (c >= 0xFF41 && c <= 0xFF5A)) {
    out.push_back(c - 0x20);
    return;
  }
  switch (c) {
    case 0xB5:
      out.push_back(0x39C);
      return;
    case 0xDF:
      out += U"SS";
      return;
    case 0xFF:
      out.push_back(0x178);
      return;
    case 0x131:
      out.push_back('I');
      return;
    case 0x149:
      out += U"\u02BCN";
      return;
    case 0x17F:
      out.push_back('S');
      return;
    case 0x3AC:
      out.push_back(0x386);
      return;
    case 0x3C2:
      out.push_back(0x3A3);
      return;
    case 0x3CC:
      out.push_back(0x38C);
      return;
    case 0x3CD:
      out.push_back(0x38E);
      return;
    case 0x3CE:
      out.push_back(0x38F);
      return;
    case 0x4CF:
      out.push_back(0x4C0);
      return;
    default:
      break;
  }
  if (c >= 0x3AD && c <= 0x3AF) return out.push_back(c - 0x25);
  if (c >= 0x450 && c <= 0x45F) return out.push_back(c - 0x50);
  // Alternating pairs, upper at even code points.
  if (in_pairs(c, 0x100, 0x137) || in_pairs(c, 0x14A, 0x177) || in_pairs(c, 0x460, 0x481) ||
      in_pairs(c, 0x48A, 0x4BF) || in_pairs(c, 0x4D0, 0x52F)) {
    if (c >= 0x500) unsupported_case(c);
    if (c == 0x130) return out.push_back(c);
    return out.push_back(c & 1 ? c - 1 : c);
  }
  // Alternating pairs, upper at odd code points.
  if (in_pairs(c, 0x139, 0x148) || in_pairs(c, 0x179, 0x17E) || in_pairs(c, 0x4C1, 0x4CE))
    return out.push_back(c & 1 ? c : c - 1);
  if (unsupported_cased(c)) unsupported_case(c);
  out.push_back(c);
}

void to_lower(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2 && c != 0x3A3) ||
      (c >= 0x410 && c <= 0x42F) || (c >= 0xFF21 && c <= 0xFF3A)) {
    out.push_back(c + 32);
    return;
  }
  switch (c) {
    case 0x130:
      out += U"i\u0307";
      return;
    case 0x178:
      out.push_back(0xFF);
      return;
    case 0x386:
      out.push_back(0x3AC);
      return;
    case 0x38C:
      out.push_back(0x3CC);
      return;
    case 0x38E:
      out.push_back(0x3CD);
      return;
    case 0x38F:
      out.push_back(0x3CE);
      return;
    case 0x3A3:
      unsupported_case(c);  // final sigma depends on the context in Python
    case 0x4C0:
      out.push_back(0x4CF);
      return;
    default:
      break;
  }
  if (c >= 0x388 && c <= 0x38A) return out.push_back(c + 0x25);
  if (c >= 0x400 && c <= 0x40F) return out.push_back(c + 0x50);
  if (in_pairs(c, 0x100, 0x137) || in_pairs(c, 0x14A, 0x177) || in_pairs(c, 0x460, 0x481) ||
      in_pairs(c, 0x48A, 0x4BF) || in_pairs(c, 0x4D0, 0x52F)) {
    if (c >= 0x500) unsupported_case(c);
    if (c == 0x131) return out.push_back(c);
    return out.push_back(c & 1 ? c : c + 1);
  }
  if (in_pairs(c, 0x139, 0x148) || in_pairs(c, 0x179, 0x17E) || in_pairs(c, 0x4C1, 0x4CE))
    return out.push_back(c & 1 ? c + 1 : c);
  if (unsupported_cased(c)) unsupported_case(c);
  out.push_back(c);
}

}  // namespace

std::string upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) to_upper(out, c);
  return encode(out);
}

std::string lower(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) to_lower(out, c);
  return encode(out);
}

std::string capitalize(std::string_view s) {
  const std::u32string u = decode(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      // Python uses the title case of the first character; it equals upper case for the
      // scripts handled here except for the ligature-like characters, which throw.
      if (u[0] == 0xDF || u[0] == 0x149) unsupported_case(u[0]);
      to_upper(out, u[0]);
    } else {
      to_lower(out, u[i]);
    }
  }
  return encode(out);
}

// ---- repr and JSON -------------------------------------------------------------------------

namespace {

// Python's str.isprintable() for one character (approximated: unassigned code points count as
// printable).
bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  static constexpr std::pair<char32_t, char32_t> kNot[] = {
      {0x600, 0x605},     {0x61C, 0x61C},     {0x6DD, 0x6DD},     {0x70F, 0x70F},      {0x890, 0x891},
      {0x8E2, 0x8E2},     {0x1680, 0x1680},   {0x180E, 0x180E},   {0x2000, 0x200F},    {0x2028, 0x202F},
      {0x205F, 0x2064},   {0x2066, 0x206F},   {0x3000, 0x3000},   {0xD800, 0xF8FF},    {0xFEFF, 0xFEFF},
      {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD}, {0x13430, 0x1343F},  {0x1BCA0, 0x1BCA3},
      {0x1D173, 0x1D17A}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xF0000, 0x10FFFF},
  };
  for (const auto& [lo, hi] : kNot)
    if (c >= lo && c <= hi) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, v);
  out += buf;
}

}  // namespace

std::string repr(std::string_view s) {
  const std::u32string u = decode(s);
  const bool has_single = u.find(U'\'') != std::u32string::npos;
  const bool has_double = u.find(U'"') != std::u32string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex(out, "\\x", c, 2);
    } else if (c <= 0xFFFF) {
      append_hex(out, "\\u", c, 4);
    } else {
      append_hex(out, "\\U", c, 8);
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-1.2345e+17": shortest round-trip digits
  const size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char ch : mant)
    if (ch != '.') digits += ch;
  std::string out = sign;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out += digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + e;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c > 0xFFFF) {  // a surrogate pair
            const uint32_t v = c - 0x10000;
            append_hex(out, "\\u", 0xD800 + (v >> 10), 4);
            append_hex(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
          } else {
            append_hex(out, "\\u", c, 4);
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace eg::jinja::py
