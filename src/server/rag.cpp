#include "server/rag.h"

#include <algorithm>
#include <cstdio>

#include "kb/rag_prompt.h"
#include "server/api_error.h"
#include "server/job.h"

namespace eg::server {

using ojson = nlohmann::ordered_json;

namespace {

ojson* last_user(ojson& body) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) return nullptr;
  for (auto m = it->rbegin(); m != it->rend(); ++m)
    if (m->is_object() && m->contains("role") && (*m)["role"] == "user") return &*m;
  return nullptr;
}

bool flag(const ojson& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_boolean()) throw ApiError(400, std::string("'") + key + "' must be a boolean", key);
  return it->get<bool>();
}

std::string text_of(const ojson& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string t;
  if (content.is_array())
    for (const auto& p : content)
      if (p.is_object() && p.value("type", "") == "text" && p.contains("text") && p["text"].is_string()) {
        if (!t.empty()) t += "\n";
        t += p["text"].get<std::string>();
      }
  return t;
}

}  // namespace

std::string last_user_text(const ojson& body) {
  ojson& b = const_cast<ojson&>(body);
  const ojson* m = last_user(b);
  return m && m->contains("content") ? text_of((*m)["content"]) : "";
}

bool faq_allowed(const ojson& body) { return flag(body, "faq"); }

nlohmann::json apply_rag(ojson& body, const KbServeOptions& o, const Tokenizer& tok, int context_tokens) {
  if (!o.kb || !flag(body, "kb")) return nullptr;
  ojson* m = last_user(body);
  if (!m || !m->contains("content")) return nullptr;  // parse_chat_request reports what is wrong
  ojson& content = (*m)["content"];
  if (!content.is_string() && !content.is_array()) return nullptr;
  const std::string question = text_of(content);
  if (question.find_first_not_of(" \t\r\n") == std::string::npos) return nlohmann::json::array();
  kb::SearchOptions so;
  so.k = o.passages;
  std::vector<kb::SearchHit> hits;
  try {
    hits = o.kb->search(question, so);
  } catch (const Error& e) {
    throw ApiError(500, std::string("knowledge base search failed: ") + e.what());
  }
  const int budget = std::max(64, std::min(o.budget_tokens, context_tokens / 2));
  const kb::RagPrompt rp = kb::build_rag_prompt(question, hits, budget, [&tok](const std::string& s) {
    return static_cast<int>(tok.encode(s, false, false).size());
  });
  if (content.is_string()) {
    content = rp.message;
  } else {  // images and audio parts stay, in order; the text parts become the one RAG text part
    ojson parts = ojson::array();
    for (const auto& p : content)
      if (!(p.is_object() && p.value("type", "") == "text")) parts.push_back(p);
    parts.push_back(ojson{{"type", "text"}, {"text", rp.message}});
    content = parts;
  }
  nlohmann::json used = nlohmann::json::array();
  for (size_t i = 0; i < rp.used.size(); ++i) {
    const auto& h = rp.used[i];
    used.push_back({{"n", i + 1}, {"source", h.source}, {"offset", h.offset}, {"length", h.length}, {"score", h.score}});
  }
  return used;
}

bool faq_fallback(const KbServeOptions& o, const std::string& query, JobResult& r) {
  if (!o.faq || query.empty()) return false;
  std::optional<kb::FaqMatch> m;
  try {
    m = kb::faq_match(*o.faq, query, o.faq_options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edgegemma serve: FAQ lookup failed: %s\n", e.what());
    return false;
  }
  if (!m) return false;
  r.faq = {{"question", m->question}, {"similarity", m->similarity}, {"method", m->method},
           {"error", r.error_message}, {"status", r.error_status}};
  r.text = m->answer;
  r.finish = "faq";
  r.error_status = 0;
  r.error_message.clear();
  r.tool_calls = nullptr;
  return true;
}

}  // namespace eg::server
