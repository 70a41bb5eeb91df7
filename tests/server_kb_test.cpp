// `serve --kb` / `--faq` / `--first-token-timeout` in process (server/rag.h): RAG passages in the
// prompt and in "kb_passages", "kb": false, the FAQ answer when a forced first-token deadline
// stops generation (finish_reason "faq", the "faq" field, /metrics), streaming too, and the error
// standing when the FAQ has no match.
#include <gtest/gtest.h>

#include "kb/faq.h"
#include "kb/knowledge_base.h"
#include "kb_test_embedder.h"
#include "server_test_util.h"

namespace {

using namespace egtest;
using nlohmann::json;

std::string tiny() { return shared_dir() + "/models/tiny-gemma3"; }

struct Bases {
  std::string dir = make_temp_dir();
  TrigramEmbedder emb;
  std::shared_ptr<eg::kb::KnowledgeBase> kb;
  Bases() {
    write_file(dir + "/lighthouse.txt", "The Skerry Island lighthouse lamp was converted from whale oil to kerosene in 1893.\n");
    write_file(dir + "/bread.txt", "A sourdough starter needs flour and water, fed daily.\n");
    kb = std::shared_ptr<eg::kb::KnowledgeBase>(eg::kb::KnowledgeBase::open(dir + "/kb.db", {true}).release());
    kb->use_embedder(&emb, "trigram");
    kb->add_file(dir + "/lighthouse.txt");
    kb->add_file(dir + "/bread.txt");
    eg::kb::faq_add(*kb, "When was the lighthouse converted to kerosene?", "In 1893 (FAQ).");
  }
};

eg::server::ServerOptions opts() {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 1024;
  return o;
}

TEST(ServerKb, RagPutsPassagesInThePromptAndReportsThem) {
  Bases b;
  eg::server::ServerOptions o = opts();
  o.kb.kb = b.kb;
  TestServer s(tiny(), o);
  TestServer plain(tiny(), opts());
  const json body = chat_body("When was the lighthouse lamp converted to kerosene?", 4);
  auto [st, r] = s.post("/v1/chat/completions", body);
  ASSERT_EQ(st, 200) << r.dump();
  ASSERT_TRUE(r.contains("kb_passages")) << r.dump();
  ASSERT_FALSE(r["kb_passages"].empty());
  EXPECT_EQ(r["kb_passages"][0]["n"], 1);
  EXPECT_EQ(r["kb_passages"][0]["source"], b.dir + "/lighthouse.txt");
  EXPECT_EQ(r["kb_passages"][0]["offset"], 0);
  EXPECT_GT(r["kb_passages"][0]["score"].get<double>(), 0);
  auto [st0, r0] = plain.post("/v1/chat/completions", body);
  ASSERT_EQ(st0, 200);
  EXPECT_FALSE(r0.contains("kb_passages"));
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), r0["usage"]["prompt_tokens"].get<int>() + 20);
  // "kb": false: no retrieval, the same prompt as without --kb.
  json off = body;
  off["kb"] = false;
  auto [st1, r1] = s.post("/v1/chat/completions", off);
  ASSERT_EQ(st1, 200);
  EXPECT_FALSE(r1.contains("kb_passages"));
  EXPECT_EQ(r1["usage"]["prompt_tokens"], r0["usage"]["prompt_tokens"]);
  off["kb"] = "no";
  EXPECT_EQ(s.post("/v1/chat/completions", off).first, 400);
  // Streaming: the final chunk carries kb_passages.
  json sb = body;
  sb["stream"] = true;
  const auto ev = s.stream("/v1/chat/completions", sb);
  ASSERT_GE(ev.size(), 2u);
  const json& last = ev[ev.size() - 2];
  ASSERT_TRUE(last.contains("kb_passages")) << last.dump();
  EXPECT_EQ(last["kb_passages"][0]["source"], b.dir + "/lighthouse.txt");
  EXPECT_EQ(s.metric("edgegemma_kb_requests_total"), 2);
}

TEST(ServerKb, FaqAnswersWhenTheFirstTokenDeadlinePasses) {
  Bases b;
  eg::server::ServerOptions o = opts();
  o.kb.faq = b.kb;
  o.kb.faq_options.vector_threshold = 0.6;
  o.kb.first_token_timeout_s = 1e-9;  // forced: no request gets its first token in time
  TestServer s(tiny(), o);
  auto [st, r] = s.post("/v1/chat/completions", chat_body("When was the lighthouse converted to kerosene?", 8));
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "faq");
  EXPECT_EQ(content_of(r), "In 1893 (FAQ).");
  ASSERT_TRUE(r.contains("faq"));
  EXPECT_EQ(r["faq"]["question"], "When was the lighthouse converted to kerosene?");
  EXPECT_EQ(r["faq"]["status"], 504);
  EXPECT_NE(r["faq"]["error"].get<std::string>().find("first-token"), std::string::npos);
  EXPECT_GE(r["faq"]["similarity"].get<double>(), 0.6);
  // Streaming: the answer as content, then finish_reason "faq".
  json sb = chat_body("when was the lighthouse converted to kerosene", 8);
  sb["stream"] = true;
  const auto ev = s.stream("/v1/chat/completions", sb);
  EXPECT_EQ(joined_deltas(ev), "In 1893 (FAQ).");
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "faq");
  EXPECT_TRUE(ev[ev.size() - 2].contains("faq"));
  // No good match: the error stands.
  // (The status line went out before generation ended: the error is the body, as for any job
  // that fails after it was accepted.)
  auto [st2, r2] = s.post("/v1/chat/completions", chat_body("Tell me a story about a cat.", 8));
  ASSERT_TRUE(r2.contains("error")) << st2 << " " << r2.dump();
  EXPECT_NE(r2["error"]["message"].get<std::string>().find("first-token"), std::string::npos);
  EXPECT_FALSE(r2.contains("choices"));
  // "faq": false: the error stands too.
  json off = chat_body("When was the lighthouse converted to kerosene?", 8);
  off["faq"] = false;
  EXPECT_TRUE(s.post("/v1/chat/completions", off).second.contains("error"));
  EXPECT_EQ(s.metric("edgegemma_faq_answers_total"), 2);
  EXPECT_EQ(s.metric("edgegemma_faq_misses_total"), 1);
  EXPECT_EQ(s.metric("edgegemma_first_token_timeouts_total"), 4);
}

TEST(ServerKb, WithoutADeadlineGenerationIsUntouched) {
  Bases b;
  eg::server::ServerOptions o = opts();
  o.kb.faq = b.kb;
  o.kb.first_token_timeout_s = 60;
  TestServer s(tiny(), o);
  TestServer plain(tiny(), opts());
  const json body = chat_body("When was the lighthouse converted to kerosene?", 6);
  auto [st, r] = s.post("/v1/chat/completions", body);
  auto [st0, r0] = plain.post("/v1/chat/completions", body);
  ASSERT_EQ(st, 200);
  EXPECT_NE(r["choices"][0]["finish_reason"], "faq");
  EXPECT_FALSE(r.contains("faq"));
  EXPECT_EQ(content_of(r), content_of(r0));
  EXPECT_EQ(s.metric("edgegemma_faq_answers_total"), 0);
}

}  // namespace
