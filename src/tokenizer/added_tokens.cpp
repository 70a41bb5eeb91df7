#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <map>

#include "tokenizer/utf8.h"

namespace eg::tok {

void AddedTokenMatcher::build(std::vector<const AddedToken*> tokens,
                              const std::vector<std::string>& patterns) {
  tokens_ = std::move(tokens);
  std::vector<std::map<uint8_t, int32_t>> children(1);
  std::vector<int32_t> node_token(1, -1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    int32_t node = 0;
    for (char c : p) {
      const auto b = static_cast<uint8_t>(c);
      auto it = children[node].find(b);
      if (it == children[node].end()) {
        const auto created = static_cast<int32_t>(children.size());
        children[node][b] = created;
        children.emplace_back();
        node_token.push_back(-1);
        node = created;
      } else {
        node = it->second;
      }
    }
    // Identical patterns: the first one added is reported, as in Aho-Corasick.
    if (node_token[node] < 0) node_token[node] = static_cast<int32_t>(t);
  }
  first_edge_.assign(children.size() + 1, 0);
  edge_byte_.clear();
  edge_to_.clear();
  for (size_t n = 0; n < children.size(); ++n) {
    first_edge_[n] = static_cast<uint32_t>(edge_byte_.size());
    for (const auto& [b, to] : children[n]) {
      edge_byte_.push_back(b);
      edge_to_.push_back(to);
    }
  }
  first_edge_[children.size()] = static_cast<uint32_t>(edge_byte_.size());
  node_token_ = std::move(node_token);
  std::fill(std::begin(root_child_), std::end(root_child_), -1);
  for (const auto& [b, to] : children[0]) root_child_[b] = to;
}

int32_t AddedTokenMatcher::longest_at(std::string_view s, size_t pos, size_t* len) const {
  int32_t node = root_child_[static_cast<uint8_t>(s[pos])];
  int32_t best = -1;
  size_t i = pos + 1;
  while (node >= 0) {
    if (node_token_[node] >= 0) {
      best = node_token_[node];
      *len = i - pos;
    }
    if (i >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[i]);
    const uint32_t lo = first_edge_[node], hi = first_edge_[node + 1];
    int32_t next = -1;
    for (uint32_t e = lo; e < hi; ++e) {  // edges are sorted; most nodes have one or two
      if (edge_byte_[e] == b) {
        next = edge_to_[e];
        break;
      }
      if (edge_byte_[e] > b) break;
    }
    node = next;
    ++i;
  }
  return best;
}

namespace {

// Rust regex `\w` is Unicode-aware; this approximation treats ASCII alphanumerics, '_' and every
// non-ASCII character other than whitespace as word characters. Only single_word tokens use it
// (none of the Gemma tokenizers have one).
bool is_word_char(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !utf8::is_rust_whitespace(c);
}

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return is_word_char(utf8::decode_at(s, i, &len));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t len = 0;
  return is_word_char(utf8::decode_at(s, 0, &len));
}

// Start of the whitespace run at the end of s (regex `\s*$`).
size_t space_leftmost_at_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t len = 0;
    if (!utf8::is_rust_whitespace(utf8::decode_at(s, i, &len))) break;
    end = i;
  }
  return end;
}

// Length of the whitespace run at the start of s (regex `^\s*`).
size_t space_rightmost_at_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!utf8::is_rust_whitespace(utf8::decode_at(s, i, &len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedTokenMatcher::split(std::string_view s, bool skip_special,
                              std::vector<Segment>& out) const {
  if (s.empty() || tokens_.empty()) {
    out.push_back(Segment{0, s.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t mlen = 0;
    const int32_t t = longest_at(s, pos, &mlen);
    if (t < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + mlen;
    pos = stop;  // the automaton resumes after the match, whatever the filters below decide
    const AddedToken& tok = *tokens_[t];
    if (skip_special && tok.special) continue;
    if (tok.single_word) {
      const bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(space_leftmost_at_end(s.substr(0, start)), start_offset);
    if (tok.rstrip) stop += space_rightmost_at_start(s.substr(stop));
    if (start_offset < start) out.push_back(Segment{start_offset, start, -1});
    out.push_back(Segment{start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset != s.size()) out.push_back(Segment{start_offset, s.size(), -1});
}

}  // namespace eg::tok
