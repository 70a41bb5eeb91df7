// Matcher: the allowed-token set of a grammar state. Two paths (both exact):
//  - inside a string (every thread in a clean string-body state): the precomputed bitset of
//    string-safe tokens (they keep the string open in the same state class; for a maxLength-
//    bounded string, those with at most the remaining number of code points), plus a trie walk
//    over the remaining tokens only;
//  - elsewhere: a depth-first walk of the vocabulary's byte trie, feeding each byte to the
//    thread set and pruning a subtree as soon as no thread survives its prefix.
#include "grammar/matcher.h"

#include <cmath>

#include "core/error.h"
#include "grammar/grammar.h"

namespace eg::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> v)
    : g_(std::move(g)), v_(std::move(v)), m_(g_->def()) {
  const GrammarDef& d = g_->def();
  for (size_t k = 0; k < d.specials.size(); ++k) {
    const int32_t id = v_->special_id(d.specials[k]);
    if (id < 0)
      throw Error("grammar: the tokenizer has no special token " + d.specials[k] +
                  " (this grammar needs Gemma 4's tool-call tokens)");
    specials_.emplace_back(id, 256 + static_cast<int>(k));
  }
  m_.init(state_);
}

Matcher::Matcher(const Matcher& o)
    : g_(o.g_), v_(o.v_), m_(o.m_), state_(o.state_), ended_(o.ended_), specials_(o.specials_) {}

Matcher& Matcher::operator=(const Matcher& o) {
  if (this != &o) {
    g_ = o.g_, v_ = o.v_, m_ = o.m_, state_ = o.state_, ended_ = o.ended_, specials_ = o.specials_;
  }
  return *this;
}

int Matcher::sym_of_special(int32_t id) const {
  for (const auto& [tid, sym] : specials_)
    if (tid == id) return sym;
  return -1;
}

bool Matcher::feed_token(const ThreadSet& in, int32_t id, ThreadSet& out) const {
  if (id < 0 || id >= v_->size()) return false;
  if (v_->is_special(id)) {
    const int sym = sym_of_special(id);
    if (sym < 0) return false;
    m_.feed(in, sym, out);
    return !out.empty();
  }
  const std::string_view b = v_->bytes(id);
  if (b.empty()) return false;
  const ThreadSet* cur = &in;
  ThreadSet* bufs[2] = {&out, &tmp_b_};
  // Alternate buffers so the last byte lands in `out`.
  size_t k = (b.size() % 2 == 1) ? 0 : 1;
  for (unsigned char c : b) {
    ThreadSet* nxt = bufs[k];
    m_.feed(*cur, c, *nxt);
    if (nxt->empty()) {
      out.clear();
      return false;
    }
    cur = nxt;
    k ^= 1;
  }
  return true;
}

bool Matcher::complete() const { return !ended_ && m_.complete(state_); }

bool Matcher::allows(int32_t id) const {
  if (ended_ || id < 0 || id >= v_->size()) return false;
  if (v_->is_end(id)) return m_.complete(state_);
  return feed_token(state_, id, tmp_a_);
}

void Matcher::accept(int32_t id) {
  if (ended_) throw Error("grammar: token " + std::to_string(id) + " after the end of the output");
  if (id >= 0 && id < v_->size() && v_->is_end(id)) {
    if (!m_.complete(state_))
      throw Error("grammar: end token " + std::to_string(id) + " before the output is complete");
    ended_ = true;
    return;
  }
  if (!feed_token(state_, id, tmp_a_)) {
    std::string text = (id >= 0 && id < v_->size()) ? std::string(v_->bytes(id)) : std::string();
    throw Error("grammar: token " + std::to_string(id) + " ('" + text + "') is not allowed here");
  }
  std::swap(state_, tmp_a_);
}

void Matcher::walk(const TokenTrie& tr, int32_t node, size_t depth) {
  const ThreadSet& cur = depth == 0 ? state_ : depth_[depth];
  for (int32_t ch = tr.nodes[static_cast<size_t>(node)].first_child; ch >= 0;
       ch = tr.nodes[static_cast<size_t>(ch)].next_sibling) {
    const TokenTrie::Node& n = tr.nodes[static_cast<size_t>(ch)];
    ThreadSet& nxt = depth_[depth + 1];
    m_.feed(cur, n.byte, nxt);
    if (nxt.empty()) continue;
    for (int32_t k = n.tok_begin; k < n.tok_begin + n.tok_count; ++k) {
      const int32_t id = tr.ids[static_cast<size_t>(k)];
      bits_[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
    }
    if (n.first_child >= 0) walk(tr, ch, depth + 1);
  }
}

const std::vector<uint64_t>& Matcher::allowed() {
  const size_t words = (static_cast<size_t>(v_->size()) + 63) / 64;
  bits_.assign(words, 0);
  if (ended_) return bits_;
  // One thread set per trie depth, sized up front (walk() keeps references into depth_).
  if (depth_.size() < v_->trie_all().max_len + 2) depth_.resize(v_->trie_all().max_len + 2);
  // A string bounded by maxLength takes only the safe tokens that fit in the room left (the
  // max over threads: a safe token of k code points keeps exactly the threads with room >= k).
  const int tool = m_.all_in_clean_string(state_, false) ? 0 : m_.all_in_clean_string(state_, true) ? 1 : -1;
  const std::vector<uint64_t>* safe = tool < 0 ? nullptr : v_->safe_bits_upto(tool == 1, m_.clean_string_room(state_));
  if (safe != nullptr) {
    bits_ = *safe;
    walk(v_->trie_rest(tool == 1), 0, 0);
  } else {
    walk(v_->trie_all(), 0, 0);
  }
  for (const auto& [id, sym] : specials_) {
    m_.feed(state_, sym, tmp_a_);
    if (!tmp_a_.empty()) bits_[static_cast<size_t>(id / 64)] |= uint64_t{1} << (id % 64);
  }
  const bool done = m_.complete(state_);
  for (int32_t id : v_->end_ids()) {
    const uint64_t bit = uint64_t{1} << (id % 64);
    if (done) bits_[static_cast<size_t>(id / 64)] |= bit;
    else bits_[static_cast<size_t>(id / 64)] &= ~bit;
  }
  return bits_;
}

void Matcher::mask(float* logits, int n_vocab) {
  const std::vector<uint64_t>& bits = allowed();
  const int n_tok = std::min(n_vocab, v_->size());
  for (int w = 0; w * 64 < n_tok; ++w) {
    const uint64_t word = bits[static_cast<size_t>(w)];
    if (word == ~uint64_t{0}) continue;
    const int end = std::min(n_tok, (w + 1) * 64);
    for (int id = w * 64; id < end; ++id)
      if (!((word >> (id - w * 64)) & 1)) logits[id] = -INFINITY;
  }
  for (int id = n_tok; id < n_vocab; ++id) logits[id] = -INFINITY;
}

}  // namespace eg::grammar
