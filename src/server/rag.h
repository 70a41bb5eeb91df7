// Knowledge-base features of `serve` (docs/server.md, docs/knowledge-base.md):
//   RAG (--kb DB): the last user message of a chat request is replaced by kb/rag_prompt.h's
//     message (the top passages with [n] source labels, then the question); the response reports
//     the passages in "kb_passages": [{"n", "source", "offset", "length", "score"}]. A request
//     turns it off with the extension field "kb": false.
//   FAQ fallback (--faq DB): a chat request whose generation failed (an engine error, the memory
//     budget, --first-token-timeout) before any text reached the client is answered with the best
//     FAQ answer above the threshold (kb/faq.h): finish_reason "faq" and the "faq" extension
//     {"question", "similarity", "method", "error": the error it replaced}. No match: the error
//     stands. A request turns it off with "faq": false.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kb/faq.h"
#include "kb/knowledge_base.h"
#include "tokenizer/tokenizer.h"

namespace eg::server {

struct KbServeOptions {
  std::shared_ptr<kb::KnowledgeBase> kb;   // RAG; null: off
  int passages = 4;                         // top passages retrieved
  int budget_tokens = 1024;                 // the RAG message's size, at most half the context
  std::shared_ptr<kb::KnowledgeBase> faq;  // FAQ fallback; null: off
  kb::FaqOptions faq_options;
  double first_token_timeout_s = 0;        // > 0: a job with no first token by then fails (504)
};

/// The text of the last user message of a chat body ("" when none): its string content or its
/// text parts joined by "\n".
std::string last_user_text(const nlohmann::ordered_json& body);

/// Applies RAG to a chat body when `o.kb` is set and the request does not say "kb": false
/// (a non-boolean "kb" is ApiError 400). Returns the kb_passages array (null when RAG is off).
nlohmann::json apply_rag(nlohmann::ordered_json& body, const KbServeOptions& o, const Tokenizer& tok,
                         int context_tokens);

/// Whether the request allows the FAQ fallback ("faq": false turns it off; non-boolean: 400).
bool faq_allowed(const nlohmann::ordered_json& body);

/// The FAQ answer for a failed job: fills r (text, finish "faq", faq extension) and returns true,
/// or returns false (no FAQ, no match, or a lookup error: the job's error stands).
bool faq_fallback(const KbServeOptions& o, const std::string& query, struct JobResult& r);

}  // namespace eg::server
