#include "grammar/token_vocab.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace eg::grammar {

namespace {

int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The bytes the Gemma decoder (Replace "▁" -> " ", ByteFallback, Fuse) produces for one piece.
std::string piece_bytes(const std::string& p) {
  if (p.size() == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' && p[5] == '>' && hex_val(p[3]) >= 0 &&
      hex_val(p[4]) >= 0)
    return std::string(1, static_cast<char>(hex_val(p[3]) * 16 + hex_val(p[4])));
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += p[i++];
    }
  }
  return out;
}

// Valid UTF-8 made of complete characters (no overlongs, surrogates or > U+10FFFF).
bool complete_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 2;
    else if (c == 0xED) n = 2, hi = 0x9F;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else return false;
    ++i;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i]);
      if (d < lo || d > hi) return false;
      lo = 0x80, hi = 0xBF;
    }
  }
  return true;
}

bool json_safe(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == '"' || c == '\\') return false;
  return complete_utf8(s);
}

bool tool_safe(std::string_view s) {
  for (unsigned char c : s)
    if (c == '<' || (c < 0x20 && c != '\n' && c != '\t' && c != '\r')) return false;
  return complete_utf8(s);
}

int32_t code_points(std::string_view s) {
  int32_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// by_len[r]: the ids of `safe` (a bitset) with <= r code points, r < min(max_len, cap).
void build_upto(const TokenVocab& v, const std::vector<uint64_t>& safe, int32_t& max_len,
                std::vector<std::vector<uint64_t>>& by_len) {
  const int32_t n = v.size();
  max_len = 0;
  std::vector<int32_t> len(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id)
    if ((safe[static_cast<size_t>(id / 64)] >> (id % 64)) & 1) {
      len[static_cast<size_t>(id)] = code_points(v.bytes(id));
      max_len = std::max(max_len, len[static_cast<size_t>(id)]);
    }
  const int32_t levels = std::min(max_len, TokenVocab::kSafeByLengthCap);
  by_len.assign(static_cast<size_t>(levels), std::vector<uint64_t>(safe.size(), 0));
  for (int32_t id = 0; id < n; ++id) {
    if (!((safe[static_cast<size_t>(id / 64)] >> (id % 64)) & 1)) continue;
    for (int32_t r = len[static_cast<size_t>(id)]; r < levels; ++r)
      by_len[static_cast<size_t>(r)][static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
  }
}

void build_trie(const TokenVocab& v, std::vector<int32_t> ids, TokenTrie& tr) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const auto x = v.bytes(a), y = v.bytes(b);
    return x != y ? x < y : a < b;
  });
  tr.nodes.assign(1, TokenTrie::Node{});
  tr.ids = ids;
  std::vector<int32_t> last_child(1, -1);
  std::vector<int32_t> path = {0};  // path[d]: node of the previous token's first d bytes
  std::string_view prev;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string_view b = v.bytes(ids[k]);
    tr.max_len = std::max(tr.max_len, b.size());
    size_t l = 0;
    while (l < prev.size() && l < b.size() && prev[l] == b[l]) ++l;
    path.resize(l + 1);
    for (size_t d = l; d < b.size(); ++d) {
      const int32_t parent = path[d];
      TokenTrie::Node n;
      n.byte = static_cast<uint8_t>(b[d]);
      const auto id = static_cast<int32_t>(tr.nodes.size());
      tr.nodes.push_back(n);
      last_child.push_back(-1);
      if (last_child[static_cast<size_t>(parent)] < 0) tr.nodes[static_cast<size_t>(parent)].first_child = id;
      else tr.nodes[static_cast<size_t>(last_child[static_cast<size_t>(parent)])].next_sibling = id;
      last_child[static_cast<size_t>(parent)] = id;
      path.push_back(id);
    }
    TokenTrie::Node& end = tr.nodes[static_cast<size_t>(path[b.size()])];
    if (end.tok_count == 0) end.tok_begin = static_cast<int32_t>(k);
    ++end.tok_count;
    prev = b;
  }
}

}  // namespace

const std::vector<uint64_t>* TokenVocab::safe_bits_upto(bool tool, int32_t room) const {
  if (room >= safe_max_chars(tool)) return &safe_bits(tool);
  const auto& by_len = tool ? safe_upto_tool_ : safe_upto_json_;
  if (room >= 0 && static_cast<size_t>(room) < by_len.size()) return &by_len[static_cast<size_t>(room)];
  return nullptr;
}

bool TokenVocab::is_end(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

int32_t TokenVocab::special_id(std::string_view text) const {
  for (const auto& [t, id] : special_ids_)
    if (t == text) return id;
  return -1;
}

std::shared_ptr<const TokenVocab> TokenVocab::build(const Tokenizer& tok, std::vector<int32_t> end_ids) {
  auto v = std::make_shared<TokenVocab>();
  const int32_t n = tok.vocab_size();
  for (int32_t id : end_ids)
    if (id < 0 || id >= n)
      throw Error("grammar: end token id " + std::to_string(id) + " is outside the vocabulary (size " +
                  std::to_string(n) + ")");
  v->end_ids_ = std::move(end_ids);
  v->off_.reserve(static_cast<size_t>(n) + 1);
  v->off_.push_back(0);
  v->special_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_special(id)) {
      v->special_[static_cast<size_t>(id)] = 1;
      v->special_ids_.emplace_back(tok.piece(id), id);
    } else {
      v->data_ += piece_bytes(tok.piece(id));
    }
    v->off_.push_back(static_cast<uint32_t>(v->data_.size()));
  }
  const size_t words = (static_cast<size_t>(n) + 63) / 64;
  v->safe_json_.assign(words, 0);
  v->safe_tool_.assign(words, 0);
  std::vector<int32_t> all, rest_json, rest_tool;
  for (int32_t id = 0; id < n; ++id) {
    const std::string_view b = v->bytes(id);
    if (v->is_special(id) || b.empty()) continue;
    all.push_back(id);
    const auto bit = uint64_t{1} << (id % 64);
    if (json_safe(b)) v->safe_json_[static_cast<size_t>(id / 64)] |= bit;
    else rest_json.push_back(id);
    if (tool_safe(b)) v->safe_tool_[static_cast<size_t>(id / 64)] |= bit;
    else rest_tool.push_back(id);
  }
  build_upto(*v, v->safe_json_, v->safe_max_json_, v->safe_upto_json_);
  build_upto(*v, v->safe_tool_, v->safe_max_tool_, v->safe_upto_tool_);
  build_trie(*v, all, v->all_);
  build_trie(*v, rest_json, v->rest_json_);
  build_trie(*v, rest_tool, v->rest_tool_);
  return v;
}

}  // namespace eg::grammar
