// The retrieval-augmented prompt: the user's question with the best passages of the knowledge
// base, each labelled [n] with its source, so the answer can cite them.
//
//   Answer the question using the numbered passages below when they are relevant, and cite the
//   passages you use as [n]. If they do not contain the answer, say so.
//
//   [1] (source: /docs/a.md, offset 1200)
//   <passage text>
//
//   [2] ...
//
//   Question: <question>
//
// Passages are taken in rank order while the whole message stays within `budget_tokens` (counted
// with the chat model's tokenizer); a passage that does not fit is skipped and the next one tried.
// No passage fits (or none was found): the message is the question alone.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kb/knowledge_base.h"

namespace eg::kb {

struct RagPrompt {
  std::string message;
  std::vector<SearchHit> used;  // the passages in the message, in [n] order
};

RagPrompt build_rag_prompt(const std::string& question, const std::vector<SearchHit>& hits, int budget_tokens,
                           const std::function<int(const std::string&)>& count_tokens);

}  // namespace eg::kb
