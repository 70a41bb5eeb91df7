// Per-tokenizer precomputation for constrained decoding (build once per model, share between
// requests): each token's decoded bytes, special flags, byte tries for walking the vocabulary
// with a grammar, and the sets of "string-safe" tokens that keep a JSON / tool-format string open.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace eg {
class Tokenizer;
}

namespace eg::grammar {

/// A byte trie over a subset of the vocabulary. Node 0 is the root; children are linked lists.
struct TokenTrie {
  struct Node {
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    int32_t tok_begin = 0;   // tokens whose bytes end at this node: ids[tok_begin, tok_begin+tok_count)
    uint16_t tok_count = 0;
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;
  std::vector<int32_t> ids;
  size_t max_len = 0;  // longest token, bytes
};

class TokenVocab {
 public:
  /// Precomputes everything for `tok`. end_ids: the ids that end generation (eos, end of turn;
  /// for Gemma 4 tool calls also <|tool_response>); they are allowed only where the grammar is
  /// complete. Token bytes follow the Gemma decoder: "▁" -> space, <0xNN> -> that byte.
  /// Throws eg::Error on an end id outside the vocabulary.
  static std::shared_ptr<const TokenVocab> build(const Tokenizer& tok, std::vector<int32_t> end_ids);

  int32_t size() const { return static_cast<int32_t>(special_.size()); }
  /// Decoded bytes of one id ("" for special tokens). id must be in [0, size()).
  std::string_view bytes(int32_t id) const {
    return std::string_view(data_).substr(off_[static_cast<size_t>(id)], off_[static_cast<size_t>(id) + 1] - off_[static_cast<size_t>(id)]);
  }
  bool is_special(int32_t id) const { return special_[static_cast<size_t>(id)] != 0; }
  bool is_end(int32_t id) const;
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  /// Id of the special token whose text is `text` (e.g. "<|tool_call>"), or -1.
  int32_t special_id(std::string_view text) const;

  /// All non-special tokens with non-empty bytes.
  const TokenTrie& trie_all() const { return all_; }
  /// Tokens that are NOT string-safe (JSON: tool=false; tool format: tool=true).
  const TokenTrie& trie_rest(bool tool) const { return tool ? rest_tool_ : rest_json_; }
  /// Bitset (64 ids per word) of string-safe tokens: non-special, valid complete UTF-8, and
  /// JSON: no '"', '\\' or control byte; tool format: no '<' and no control byte but \t \n \r.
  const std::vector<uint64_t>& safe_bits(bool tool) const { return tool ? safe_tool_ : safe_json_; }
  /// The string-safe tokens of at most `room` Unicode code points (for strings bounded by
  /// maxLength): safe_bits(tool) itself when room >= every safe token's length; a precomputed
  /// bitset when room < kSafeByLengthCap; nullptr otherwise (the caller walks the whole trie).
  /// room must be >= 0.
  const std::vector<uint64_t>* safe_bits_upto(bool tool, int32_t room) const;
  /// Code points of the longest string-safe token (Gemma 3, 262k: 31).
  int32_t safe_max_chars(bool tool) const { return tool ? safe_max_tool_ : safe_max_json_; }
  static constexpr int32_t kSafeByLengthCap = 64;

 private:
  std::string data_;
  std::vector<uint32_t> off_;
  std::vector<uint8_t> special_;
  std::vector<std::pair<std::string, int32_t>> special_ids_;
  std::vector<int32_t> end_ids_;
  TokenTrie all_, rest_json_, rest_tool_;
  std::vector<uint64_t> safe_json_, safe_tool_;
  // [r]: safe tokens of <= r code points, for r < min(safe_max_chars, kSafeByLengthCap).
  std::vector<std::vector<uint64_t>> safe_upto_json_, safe_upto_tool_;
  int32_t safe_max_json_ = 0, safe_max_tool_ = 0;
};

}  // namespace eg::grammar
