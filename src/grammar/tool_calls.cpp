#include "grammar/tool_calls.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

namespace eg::grammar {

namespace {

constexpr std::string_view kOpen = "<|tool_call>";
constexpr std::string_view kClose = "<tool_call|>";
constexpr std::string_view kQuote = "<|\"|>";
constexpr int kMaxDepth = 64;

using ojson = nlohmann::ordered_json;

class ValueParser {
 public:
  explicit ValueParser(std::string_view s, size_t pos) : s_(s), p_(pos) {}
  size_t pos() const { return p_; }

  std::optional<ojson> value(int depth) {
    if (depth > kMaxDepth || p_ >= s_.size()) return std::nullopt;
    if (starts(kQuote)) {
      p_ += kQuote.size();
      const size_t e = s_.find(kQuote, p_);
      if (e == std::string_view::npos) return std::nullopt;
      ojson v = std::string(s_.substr(p_, e - p_));
      p_ = e + kQuote.size();
      return v;
    }
    const char c = s_[p_];
    if (c == '{') return object(depth);
    if (c == '[') {
      ++p_;
      ojson arr = ojson::array();
      if (eat(']')) return arr;
      for (;;) {
        auto v = value(depth + 1);
        if (!v) return std::nullopt;
        arr.push_back(std::move(*v));
        if (eat(']')) return arr;
        if (!eat(',')) return std::nullopt;
      }
    }
    if (word("true")) return ojson(true);
    if (word("false")) return ojson(false);
    if (word("null") || word("None")) return ojson(nullptr);
    return number();
  }

  std::optional<ojson> object(int depth) {
    if (!eat('{')) return std::nullopt;
    ojson obj = ojson::object();
    if (eat('}')) return obj;
    for (;;) {
      std::string key;
      if (starts(kQuote)) {
        p_ += kQuote.size();
        const size_t e = s_.find(kQuote, p_);
        if (e == std::string_view::npos) return std::nullopt;
        key = std::string(s_.substr(p_, e - p_));
        p_ = e + kQuote.size();
      } else {
        const size_t b = p_;
        while (p_ < s_.size() && s_[p_] != ':' && s_[p_] != ',' && s_[p_] != '{' && s_[p_] != '}' &&
               s_[p_] != '[' && s_[p_] != ']' && s_[p_] != '<')
          ++p_;
        key = std::string(s_.substr(b, p_ - b));
        if (key.empty()) return std::nullopt;
      }
      if (!eat(':')) return std::nullopt;
      auto v = value(depth + 1);
      if (!v) return std::nullopt;
      obj[key] = std::move(*v);
      if (eat('}')) return obj;
      if (!eat(',')) return std::nullopt;
    }
  }

 private:
  bool starts(std::string_view t) const { return s_.substr(p_, t.size()) == t; }
  bool eat(char c) {
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    if (!starts(w)) return false;
    p_ += w.size();
    return true;
  }
  std::optional<ojson> number() {
    const size_t b = p_;
    auto digits = [&]() {
      const size_t d = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      return p_ > d;
    };
    eat('-');
    if (!digits()) return std::nullopt;
    bool integral = true;
    if (eat('.')) {
      integral = false;
      if (!digits()) return std::nullopt;
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      integral = false;
      ++p_;
      if (!eat('+')) eat('-');
      if (!digits()) return std::nullopt;
    }
    const std::string t(s_.substr(b, p_ - b));
    if (integral) {
      errno = 0;
      const long long v = std::strtoll(t.c_str(), nullptr, 10);
      if (errno == 0) return ojson(static_cast<int64_t>(v));
    }
    return ojson(std::strtod(t.c_str(), nullptr));
  }

  std::string_view s_;
  size_t p_;
};

// One call starting right after <|tool_call>; returns the position after it, or nullopt.
std::optional<size_t> parse_call(std::string_view text, size_t pos, ToolCall& call) {
  if (text.substr(pos, 5) != "call:") return std::nullopt;
  pos += 5;
  const size_t brace = text.find('{', pos);
  if (brace == std::string_view::npos || brace == pos) return std::nullopt;
  const std::string_view name = text.substr(pos, brace - pos);
  for (char c : name)
    if (c == '<' || c == '>' || c == ' ' || c == '\n' || c == '}' || c == ':' || c == ',') return std::nullopt;
  ValueParser vp(text, brace);
  auto args = vp.object(0);
  if (!args) return std::nullopt;
  size_t end = vp.pos();
  if (text.substr(end, kClose.size()) == kClose) end += kClose.size();
  else if (end != text.size()) return std::nullopt;
  call.name = std::string(name);
  call.arguments = std::move(*args);
  return end;
}

}  // namespace

ParsedToolOutput parse_gemma4_tool_calls(std::string_view text) {
  ParsedToolOutput out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    out.content += text.substr(pos, open - pos);
    ToolCall call;
    if (auto end = parse_call(text, open + kOpen.size(), call)) {
      out.calls.push_back(std::move(call));
      pos = *end;
    } else {
      out.content += kOpen;
      pos = open + kOpen.size();
    }
  }
  if (pos < text.size()) out.content += text.substr(pos);
  return out;
}

}  // namespace eg::grammar
