// BPE model of a HF tokenizer.json (internal header).
//
// Mirrors `tokenizers`' models::bpe: a word is split into characters (each looked up in the
// vocabulary, with byte fallback `<0xNN>` or unk for unknown characters), then merged with a
// priority queue ordered by (merge rank, position) over a linked list of symbols — the exact
// procedure of Word::merge_all, so results match HF, in O(n log n).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hash_maps.h"

namespace eg::tok {

struct BpeModel {
  std::vector<std::string> pieces;  // model vocabulary by id ("" for an id with no entry)
  std::vector<uint8_t> has_piece;   // 1 where pieces[id] is a vocabulary entry
  StringIdMap vocab;                // piece -> id
  PairMap merges;                   // (left id, right id) -> (rank, merged id)
  int32_t unk_id = -1;
  std::string unk_missing;  // the configured unk_token when it is not in the vocabulary
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  int32_t byte_ids[256];   // id of "<0xNN>" or -1
  int32_t ascii_ids[128];  // id of each 1-byte character or -1 (a fast path for lookups)

  /// Fills byte_ids / ascii_ids from `vocab`; call once the vocabulary is complete.
  void finish_tables();

  /// Tokenizes one pre-tokenized word, appending ids to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;
};

}  // namespace eg::tok
