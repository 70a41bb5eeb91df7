#include "kb/rag_prompt.h"

namespace eg::kb {

namespace {

constexpr const char* kInstruction =
    "Answer the question using the numbered passages below when they are relevant, and cite the passages you "
    "use as [n]. If they do not contain the answer, say so.\n\n";

std::string passage_block(size_t n, const SearchHit& h) {
  std::string s = "[";
  s += std::to_string(n);
  s += "] (source: ";
  s += h.source;
  s += ", offset ";
  s += std::to_string(h.offset);
  s += ")\n";
  s += h.text;
  s += "\n\n";
  return s;
}

}  // namespace

RagPrompt build_rag_prompt(const std::string& question, const std::vector<SearchHit>& hits, int budget_tokens,
                           const std::function<int(const std::string&)>& count_tokens) {
  RagPrompt r;
  const std::string tail = "Question: " + question;
  std::string body;
  int used_tokens = count_tokens(kInstruction) + count_tokens(tail);
  for (const SearchHit& h : hits) {
    const std::string block = passage_block(r.used.size() + 1, h);
    const int t = count_tokens(block);
    if (used_tokens + t > budget_tokens) continue;
    used_tokens += t;
    body += block;
    r.used.push_back(h);
  }
  r.message = r.used.empty() ? question : kInstruction + body + tail;
  return r;
}

}  // namespace eg::kb
