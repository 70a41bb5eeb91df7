// Added-token matching, as HF `tokenizers`' AddedVocabulary::find_matches (internal header).
//
// HF builds an Aho-Corasick automaton with MatchKind::LeftmostLongest over the added tokens and
// walks its non-overlapping matches: at the leftmost position where any token matches, the
// longest token wins, and the scan resumes after it. A byte trie scanned position by position
// gives exactly those matches. Each match then goes through HF's filters: with
// encode_special_tokens a special token's match is skipped (its text stays plain text, and is not
// rescanned), single_word rejects matches inside words, lstrip/rstrip widen the match over
// neighbouring whitespace.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

/// A piece of a split string: a byte range, and the added token's id or -1 for plain text.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  /// patterns[i] is the text matched for tokens[i] (its content, or its normalized content).
  void build(std::vector<const AddedToken*> tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  /// Splits `s` into plain-text and added-token segments covering it (HF find_matches).
  /// skip_special: HF encode_special_tokens. Segments are appended to `out`.
  void split(std::string_view s, bool skip_special, std::vector<Segment>& out) const;

 private:
  /// Longest pattern starting at s[pos]: its index into tokens_ and its length, or -1.
  int32_t longest_at(std::string_view s, size_t pos, size_t* len) const;

  std::vector<const AddedToken*> tokens_;
  // Trie in CSR form: node n's edges are edge_byte_/edge_to_[first_edge_[n] .. first_edge_[n+1]).
  std::vector<uint32_t> first_edge_;
  std::vector<uint8_t> edge_byte_;
  std::vector<int32_t> edge_to_;
  std::vector<int32_t> node_token_;  // index into tokens_ of the pattern ending here, or -1
  int32_t root_child_[256];
};

}  // namespace eg::tok
