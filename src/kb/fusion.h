// Hybrid retrieval helpers: the FTS5 query built from free text, and reciprocal rank fusion.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace eg::kb {

/// Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009): each id scores
/// sum over the lists it appears in of 1 / (k + rank), rank starting at 1. Best first; ties by
/// the best single rank, then by lower id. At most `limit` results.
struct Fused {
  int64_t id;
  double score;
};
std::vector<Fused> rrf_fuse(const std::vector<std::vector<int64_t>>& lists, size_t limit, int k = 60);

/// An FTS5 MATCH expression for free text: its words (letters, digits, and any non-ASCII
/// character, split at everything else), each quoted, joined with OR; at most 32 distinct words,
/// words of one ASCII character dropped. "" when the text has no word (then BM25 finds nothing).
std::string fts_query(std::string_view text);

/// The words of fts_query, lowercased (ASCII), in order, distinct.
std::vector<std::string> query_words(std::string_view text);

}  // namespace eg::kb
