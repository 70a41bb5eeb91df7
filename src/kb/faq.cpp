#include "kb/faq.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "kb/fusion.h"
#include "kb/vector_scan.h"

namespace eg::kb {

namespace {

struct Pair {
  std::string q, a;
};

void insert_pairs(KnowledgeBase& kb, const std::vector<Pair>& pairs) {
  kb.record_model();
  const bool has_model = !kb.info().model_digest.empty();
  std::lock_guard<std::mutex> lk(kb.mutex());
  if (has_model && !kb.embedder()) throw Error(kb.db().path() + ": its FAQ has vectors: adding pairs needs its model (-m)");
  std::vector<std::vector<float>> vecs;
  if (has_model) {
    std::vector<std::string> qs;
    for (const auto& p : pairs) qs.push_back(p.q);
    vecs = KnowledgeBase::embed_all(*kb.embedder(), qs, true, 16);
  }
  Transaction t(kb.db());
  Stmt s = kb.db().prepare(
      "INSERT INTO faq(question, answer, vector) VALUES (?1, ?2, ?3) "
      "ON CONFLICT(question) DO UPDATE SET answer = excluded.answer, vector = excluded.vector");
  for (size_t i = 0; i < pairs.size(); ++i) {
    s.reset();
    s.bind(1, pairs[i].q).bind(2, pairs[i].a);
    if (has_model) s.bind_blob(3, vecs[i].data(), vecs[i].size() * sizeof(float));
    else s.bind_null(3);
    s.run();
  }
  t.commit();
}

Pair checked(const std::string& q, const std::string& a, const std::string& what) {
  if (q.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(what + ": the question is empty");
  if (a.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(what + ": the answer is empty");
  check_text(q, what + ": question");
  check_text(a, what + ": answer");
  return Pair{q, a};
}

Pair pair_of(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object() || !j.contains("question") || !j.contains("answer") || !j["question"].is_string() ||
      !j["answer"].is_string())
    throw Error(what + ": expected an object {\"question\": string, \"answer\": string}");
  return checked(j["question"].get<std::string>(), j["answer"].get<std::string>(), what);
}

}  // namespace

double word_dice(const std::string& a, const std::string& b) {
  const auto wa = query_words(a), wb = query_words(b);
  if (wa.empty() || wb.empty()) return 0;
  size_t common = 0;
  for (const auto& w : wa)
    if (std::find(wb.begin(), wb.end(), w) != wb.end()) ++common;
  return 2.0 * static_cast<double>(common) / static_cast<double>(wa.size() + wb.size());
}

void faq_add(KnowledgeBase& kb, const std::string& question, const std::string& answer) {
  insert_pairs(kb, {checked(question, answer, "FAQ pair")});
}

size_t faq_import(KnowledgeBase& kb, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string data = ss.str();
  check_text(data, path);
  std::vector<Pair> pairs;
  const size_t first = data.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && data[first] == '[') {
    nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_array()) throw Error(path + ": not valid JSON");
    for (size_t i = 0; i < j.size(); ++i) pairs.push_back(pair_of(j[i], path + ": item " + std::to_string(i + 1)));
  } else {
    std::istringstream in(data);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) throw Error(path + ": line " + std::to_string(n) + ": not valid JSON");
      pairs.push_back(pair_of(j, path + ": line " + std::to_string(n)));
    }
  }
  if (pairs.empty()) throw Error(path + ": no question/answer pairs");
  insert_pairs(kb, pairs);
  return pairs.size();
}

std::optional<FaqMatch> faq_match(KnowledgeBase& kb, const std::string& query, const FaqOptions& o) {
  const bool has_model = !kb.info().model_digest.empty();
  std::lock_guard<std::mutex> lk(kb.mutex());
  Db& db = kb.db();
  std::optional<FaqMatch> best_vec, best_lex;
  if (has_model && kb.embedder() && !query.empty()) {
    const auto qv = KnowledgeBase::embed_all(*kb.embedder(), {query}, true, 1);
    Stmt s = db.prepare("SELECT id, question, answer, vector FROM faq WHERE vector IS NOT NULL ORDER BY id");
    while (s.step()) {
      const auto v = s.col_floats(3);
      if (v.size() != qv[0].size()) continue;
      float c = 0;
      cosine_scan(qv[0].data(), v.data(), 1, v.size(), &c);
      if (c >= o.vector_threshold && (!best_vec || c > best_vec->similarity))
        best_vec = FaqMatch{s.col_int(0), s.col_text(1), s.col_text(2), c, "vector"};
    }
  }
  if (best_vec) return best_vec;
  const std::string q = fts_query(query);
  if (!q.empty()) {
    Stmt s = db.prepare("SELECT f.id, f.question, f.answer FROM faq_fts JOIN faq f ON f.id = faq_fts.rowid "
                        "WHERE faq_fts MATCH ?1 ORDER BY bm25(faq_fts), f.id LIMIT 10");
    s.bind(1, q);
    while (s.step()) {
      const std::string question = s.col_text(1);
      const double d = word_dice(query, question);
      if (d >= o.lexical_threshold && (!best_lex || d > best_lex->similarity))
        best_lex = FaqMatch{s.col_int(0), question, s.col_text(2), d, "lexical"};
    }
  }
  return best_lex;
}

}  // namespace eg::kb
