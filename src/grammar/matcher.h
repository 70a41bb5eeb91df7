// Per-request constrained-decoding state: which tokens the grammar allows next.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/grammar_impl.h"
#include "grammar/token_vocab.h"

namespace eg::grammar {

class Grammar;

/// Runs one grammar over one vocabulary. Copyable (a copy continues independently).
/// Not thread-safe: one Matcher per request.
class Matcher {
 public:
  /// Throws eg::Error when the vocabulary lacks a special token the grammar names (e.g. the
  /// Gemma 4 tool-call grammar on a Gemma 3 tokenizer: "<|tool_call>").
  Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v);
  Matcher(const Matcher& o);
  Matcher& operator=(const Matcher& o);

  /// Sets logits[id] = -INFINITY for every id in [0, n_vocab) the grammar does not allow next
  /// (ids >= the tokenizer's vocabulary size are never allowed). End ids are allowed only when
  /// complete(); special tokens only where the grammar names them. Cost: see
  /// docs/performance-serving.md "Constrained decoding".
  void mask(float* logits, int n_vocab);
  /// The allowed set as a bitset (bit id%64 of word id/64), TokenVocab::size() bits.
  const std::vector<uint64_t>& allowed();
  /// Whether `id` may come next (exact, same rule as mask; costs one token's bytes).
  bool allows(int32_t id) const;
  /// Advances by `id`. Throws eg::Error naming the token when it is not allowed.
  void accept(int32_t id);
  /// A complete value (all tool calls) has been produced: an end id may come next.
  bool complete() const;
  /// An end id has been accepted: nothing more is allowed.
  bool ended() const { return ended_; }

 private:
  bool feed_token(const ThreadSet& in, int32_t id, ThreadSet& out) const;
  int sym_of_special(int32_t id) const;
  void walk(const TokenTrie& tr, int32_t node, size_t depth);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> v_;
  Machine m_;
  ThreadSet state_;
  bool ended_ = false;
  std::vector<std::pair<int32_t, int>> specials_;  // (token id, grammar symbol)
  // scratch
  mutable ThreadSet tmp_a_, tmp_b_;
  std::vector<ThreadSet> depth_;
  std::vector<uint64_t> bits_;
};

}  // namespace eg::grammar
