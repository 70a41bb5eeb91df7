// Jinja lexer (see lexer.h). Follows the rules of jinja2's lexer: the earliest of "{{", "{%",
// "{#" opens a tag; inside a tag an end delimiter counts only outside brackets; the whitespace
// rules are applied to the data token before the tag.
#include "tokenizer/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/utf8.h"

namespace eg::jinja {

namespace {

[[noreturn]] void syntax_error(int line, const std::string& msg) {
  throw Error("chat template: syntax error at line " + std::to_string(line) + ": " + msg);
}

[[noreturn]] void unsupported(int line, const std::string& what) {
  throw Error("chat template: unsupported Jinja feature '" + what + "' at line " + std::to_string(line));
}

std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline = False
  return out;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Python's `\s` (str.isspace) at s[i]: the byte length of the whitespace character, or 0.
size_t space_at(std::string_view s, size_t i) {
  size_t len = 0;
  const uint32_t c = utf8::decode_at(s, i, &len);
  return py::is_space(c) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = space_at(s, i);
    if (n == 0) break;
    i += n;
  }
  return i;
}

// str.rstrip() on UTF-8.
std::string_view rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t start = e - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at(s, start) != e - start) break;
    e = start;
  }
  return s.substr(0, e);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of a string literal's body (Python's "unicode-escape" decoding, as jinja2 does).
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == body.size()) syntax_error(line, "string literal ends with a backslash");
    const char e = body[i];
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
          const int d = i + k < body.size() ? hex_digit(body[i + k]) : -1;
          if (d < 0) syntax_error(line, std::string("truncated \\") + e + " escape in a string literal");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
          unsupported(line, "string escape of a surrogate or out-of-range code point");
        py::append_utf8(out, v);
        i += n;
        break;
      }
      case 'N':
        unsupported(line, "\\N{...} string escape");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7')
            v = v * 8 + static_cast<uint32_t>(body[i + k++] - '0');
          py::append_utf8(out, v);
          i += k - 1;
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          unsupported(line, "backslash before a non-ASCII character in a string literal");
        } else {
          out += '\\';  // unknown escapes stay as written
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t open = s_.find('{', pos_);
      while (open != std::string::npos && open + 1 < s_.size() && s_[open + 1] != '{' && s_[open + 1] != '%' &&
             s_[open + 1] != '#')
        open = s_.find('{', open + 1);
      if (open == std::string::npos || open + 1 >= s_.size()) {
        emit_data(std::string_view(s_).substr(pos_), line_);
        break;
      }
      const char kind = s_[open + 1];
      const char sign = open + 2 < s_.size() ? s_[open + 2] : '\0';
      const std::string_view full = std::string_view(s_).substr(pos_, open - pos_);
      std::string_view text = full;
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: block and comment tags
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && skip_spaces(text, l_pos) == text.size())
          text = text.substr(0, l_pos);
      }
      emit_data(text, line_);
      line_ += count_newlines(full);
      pos_ = open + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        comment();
      } else {
        if (kind == '%') check_raw();
        tag(kind == '{');
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    toks_.push_back({Token::Kind::End, "", line_});
    return std::move(toks_);
  }

 private:
  void emit_data(std::string_view text, int line) {
    if (!text.empty()) toks_.push_back({Token::Kind::Data, std::string(text), line});
  }

  // After a tag's closing delimiter: "-" strips all whitespace, trim_blocks one newline.
  void after_end(char strip, bool is_block) {
    if (strip == '-') {
      const size_t e = skip_spaces(s_, pos_);
      line_ += count_newlines(std::string_view(s_).substr(pos_, e - pos_));
      pos_ = e;
    } else if (strip != '+' && is_block && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  void comment() {
    const int start = line_;
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) syntax_error(start, "unclosed comment");
    const char sign = end > pos_ ? s_[end - 1] : '\0';
    line_ += count_newlines(std::string_view(s_).substr(pos_, end - pos_));
    pos_ = end + 2;
    after_end(sign, true);
  }

  void check_raw() {
    size_t i = pos_;
    while (i < s_.size() && (s_[i] == ' ' || s_[i] == '\t' || s_[i] == '\n')) ++i;
    if (s_.compare(i, 3, "raw") == 0 &&
        (i + 3 >= s_.size() || !(std::isalnum(static_cast<unsigned char>(s_[i + 3])) || s_[i + 3] == '_')))
      unsupported(line_, "raw");
  }

  void tag(bool is_var) {
    toks_.push_back({is_var ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", line_});
    const int start = line_;
    int depth = 0;
    while (true) {
      if (pos_ >= s_.size()) syntax_error(start, is_var ? "unclosed '{{'" : "unclosed '{%'");
      if (depth == 0) {
        const char* close = is_var ? "}}" : "%}";
        char sign = '\0';
        size_t at = pos_;
        if ((s_[pos_] == '-' || (!is_var && s_[pos_] == '+')) && s_.compare(pos_ + 1, 2, close) == 0) {
          sign = s_[pos_];
          at = pos_ + 1;
        }
        if (s_.compare(at, 2, close) == 0) {
          toks_.push_back({is_var ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", line_});
          pos_ = at + 2;
          after_end(sign, !is_var);
          return;
        }
      }
      if (const size_t n = space_at(s_, pos_); n > 0) {
        line_ += s_[pos_] == '\n';
        pos_ += n;
        continue;
      }
      const char c = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        toks_.push_back({Token::Kind::Name, s_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        op(depth);
      }
    }
  }

  void number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
    };
    const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';
    if (s_[pos_] == '0' && e + 1 < s_.size() && std::strchr("bBoOxX", s_[pos_ + 1]) != nullptr)
      unsupported(line_, "binary/octal/hex integer literal");
    digits();
    bool is_float = false;
    if (!after_dot && e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      ++e;
      digits();
      is_float = true;
    }
    if (!after_dot && e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        e = k;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (s_[i] != '_') text += s_[i];
    Token t{is_float ? Token::Kind::Float : Token::Kind::Int, text, line_};
    if (is_float) {
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) unsupported(line_, "integer literal beyond 64 bits");
    }
    toks_.push_back(std::move(t));
    pos_ = e;
  }

  void string_literal(char quote) {
    const int start = line_;
    size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != quote) i += s_[i] == '\\' ? 2 : 1;
    if (i >= s_.size()) syntax_error(start, "unterminated string literal");
    const std::string_view body = std::string_view(s_).substr(pos_ + 1, i - pos_ - 1);
    toks_.push_back({Token::Kind::String, unescape(body, start), start});
    line_ += count_newlines(body);
    pos_ = i + 1;
  }

  void op(int& depth) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* t : kTwo) {
      if (s_.compare(pos_, 2, t) == 0) {
        toks_.push_back({Token::Kind::Op, t, line_});
        pos_ += 2;
        return;
      }
    }
    const char c = s_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      syntax_error(line_, std::string("unexpected character '") + c + "'");
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) syntax_error(line_, std::string("unexpected '") + c + "'");
      --depth;
    }
    toks_.push_back({Token::Kind::Op, std::string(1, c), line_});
    ++pos_;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace eg::jinja
