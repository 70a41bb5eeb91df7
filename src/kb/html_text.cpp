// html_to_text (text_extract.h): a small, forgiving HTML-to-text pass (no DOM), written for
// indexing: what a reader sees, in reading order, with paragraph breaks.
#include <cstdint>
#include <string>
#include <string_view>

#include "kb/text_extract.h"

namespace eg::kb {

namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

void put_utf8(std::string& out, uint32_t cp) {
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Each named reference decodes to no more bytes than its own spelling.
struct Named {
  std::string_view name;
  uint32_t cp;
};
constexpr Named kNamed[] = {{"amp", '&'},      {"lt", '<'},       {"gt", '>'},       {"quot", '"'},
                            {"apos", '\''},    {"nbsp", ' '},     {"mdash", 0x2014}, {"ndash", 0x2013},
                            {"hellip", 0x2026}, {"copy", 0xA9},   {"reg", 0xAE},     {"lsquo", 0x2018},
                            {"rsquo", 0x2019}, {"ldquo", 0x201C}, {"rdquo", 0x201D}, {"euro", 0x20AC},
                            {"middot", 0xB7},  {"bull", 0x2022},  {"deg", 0xB0},     {"times", 0xD7}};

// Decodes the character reference at in[i] == '&' into `out`; returns the bytes consumed (0: not
// a reference, the '&' is literal).
size_t decode_ref(std::string_view in, size_t i, std::string& out) {
  const size_t semi = in.find(';', i + 1);
  if (semi == std::string_view::npos || semi - i > 12) return 0;
  const std::string_view body = in.substr(i + 1, semi - i - 1);
  if (body.size() >= 2 && body[0] == '#') {
    const bool hex = body[1] == 'x' || body[1] == 'X';
    const std::string_view digits = body.substr(hex ? 2 : 1);
    if (digits.empty()) return 0;
    uint32_t cp = 0;
    for (char c : digits) {
      int d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else return 0;
      cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(d);
      if (cp > 0x10FFFF) cp = 0x110000;  // saturate: invalid, U+FFFD
    }
    if (cp < 0x20 && cp != '\t' && cp != '\n') cp = cp == 0 ? 0 : ' ';
    if (cp == ' ' || cp == '\t' || cp == '\n') {
      out += ' ';
    } else {
      put_utf8(out, cp);
    }
    return semi - i + 1;
  }
  for (const Named& n : kNamed)
    if (body == n.name) {
      put_utf8(out, n.cp);
      return semi - i + 1;
    }
  return 0;
}

// Tags that end a line (1) or a paragraph (2).
int break_of(std::string_view tag) {
  static constexpr std::string_view para[] = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
                                              "blockquote", "table", "ul", "ol", "dl", "figure"};
  static constexpr std::string_view line[] = {"br", "div", "li", "tr", "dt", "dd", "section", "article",
                                              "header", "footer", "nav", "aside", "hr", "title", "main",
                                              "body", "form", "caption", "figcaption", "address"};
  for (auto t : para)
    if (tag == t) return 2;
  for (auto t : line)
    if (tag == t) return 1;
  if (tag == "td" || tag == "th") return -1;  // a cell: a space
  return 0;
}

// Index just past the '>' that ends the tag starting at `i` (quotes honoured), or in.size().
size_t tag_end(std::string_view in, size_t i) {
  char quote = 0;
  for (; i < in.size(); ++i) {
    const char c = in[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '>') {
      return i + 1;
    }
  }
  return in.size();
}

// Position of the case-insensitive `needle` in `in` from `from`, or npos.
size_t find_ci(std::string_view in, std::string_view needle, size_t from) {
  for (size_t i = from; i + needle.size() <= in.size(); ++i) {
    size_t k = 0;
    while (k < needle.size() && lower(in[i + k]) == needle[k]) ++k;
    if (k == needle.size()) return i;
  }
  return std::string_view::npos;
}

}  // namespace

std::string html_to_text(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  int pending_nl = 0;
  bool pending_space = false;
  int pre_depth = 0;
  // Separators are written lazily, before the next visible character (none at the start or end).
  auto visible = [&] {
    if (!out.empty()) {
      if (pending_nl > 0) out.append(static_cast<size_t>(pending_nl), '\n');
      else if (pending_space) out += ' ';
    }
    pending_nl = 0;
    pending_space = false;
  };
  size_t i = 0;
  while (i < in.size()) {
    const char c = in[i];
    if (c == '<') {
      if (in.substr(i, 4) == "<!--") {
        const size_t e = in.find("-->", i + 4);
        i = e == std::string_view::npos ? in.size() : e + 3;
        continue;
      }
      const bool closing = i + 1 < in.size() && in[i + 1] == '/';
      const size_t name_at = i + (closing ? 2 : 1);
      if (name_at < in.size() && (in[name_at] == '!' || in[name_at] == '?') && !closing) {
        i = tag_end(in, name_at);  // <!DOCTYPE ...>, <?xml ...?>, <![CDATA[ (its text is dropped)
        continue;
      }
      if (name_at >= in.size() || !is_alpha(in[name_at])) {  // a literal '<'
        visible();
        out += c;
        ++i;
        continue;
      }
      size_t k = name_at;
      std::string name;
      while (k < in.size() && (is_alpha(in[k]) || (in[k] >= '0' && in[k] <= '9')) && name.size() < 16)
        name += lower(in[k++]);
      const size_t end = tag_end(in, k);
      const bool self_closing = end >= 2 && in[end - 1] == '>' && in[end - 2] == '/';
      i = end;
      if (!closing && !self_closing && (name == "script" || name == "style" || name == "template")) {
        const size_t close = find_ci(in, "</" + name, i);
        i = close == std::string_view::npos ? in.size() : tag_end(in, close + 2);
        continue;
      }
      if (name == "pre") pre_depth = closing ? (pre_depth > 0 ? pre_depth - 1 : 0) : pre_depth + 1;
      const int b = break_of(name);
      if (b > 0) {
        pending_nl = std::max(pending_nl, b);
      } else if (b < 0) {
        pending_space = true;
      }
      continue;
    }
    if (is_space(c)) {
      if (pre_depth > 0 && c == '\n') {
        pending_nl = std::max(pending_nl, 1);
      } else if (pre_depth > 0 && !out.empty() && pending_nl == 0 && !pending_space) {
        out += c == '\t' ? '\t' : ' ';
      } else {
        pending_space = true;
      }
      ++i;
      continue;
    }
    if (c == '&') {
      std::string ref;
      const size_t used = decode_ref(in, i, ref);
      if (used > 0) {
        if (ref == " ") {
          pending_space = true;
        } else if (!ref.empty()) {
          visible();
          out += ref;
        }
        i += used;
        continue;
      }
    }
    visible();
    out += c;
    ++i;
  }
  return out;
}

}  // namespace eg::kb
