// FAQ pairs in a knowledge base file (table `faq`, FTS5 index `faq_fts`) and the matcher used as
// the server's fallback answer when generation fails (docs/knowledge-base.md, "FAQ fallback").
//
// Matching a query against the questions:
//   - by embedding (when the base has a model and an embedder is set): cosine similarity of the
//     query's and the question's vectors (both embedded with the "query" task), every pair scanned;
//   - by words: the 10 best questions by FTS5 BM25, scored by the Dice coefficient of the two word
//     sets (fusion.h query_words): 2 |A n B| / (|A| + |B|), 1 for the same words.
// The best pair whose cosine >= vector_threshold, else whose Dice >= lexical_threshold, matches;
// otherwise there is no match (and the server keeps its error).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kb/knowledge_base.h"

namespace eg::kb {

struct FaqMatch {
  int64_t id = 0;
  std::string question, answer;
  double similarity = 0;
  std::string method;  // "vector" or "lexical"
};

struct FaqOptions {
  double vector_threshold = 0.75;
  double lexical_threshold = 0.6;
};

/// Adds (or replaces the answer of) a question; embeds it when the base has an embedder. Throws
/// eg::Error for empty or non-UTF-8 text.
void faq_add(KnowledgeBase& kb, const std::string& question, const std::string& answer);
/// Adds the pairs of a JSON Lines file ({"question": ..., "answer": ...} per line) or of a JSON
/// array of such objects, in one transaction; returns how many. Errors name the file and line.
size_t faq_import(KnowledgeBase& kb, const std::string& path);
std::optional<FaqMatch> faq_match(KnowledgeBase& kb, const std::string& query, const FaqOptions& o = {});

/// Dice coefficient of the word sets of a and b (0 when either has no word).
double word_dice(const std::string& a, const std::string& b);

}  // namespace eg::kb
