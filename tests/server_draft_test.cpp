// Draft prefill over HTTP (POST /v1/prefill, docs/server.md "Prefill while typing"): a draft's
// stable prefix is prefilled when the server is idle, the request that follows reuses it
// (usage.prompt_tokens_details.cached_tokens) and answers exactly as without the draft; drafts
// never run while a request has work; a newer draft of a client replaces the pending one; the
// pending drafts are bounded; images are left out; the route is authenticated; /metrics counts.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "server_test_util.h"

using nlohmann::json;
using namespace egtest;

namespace {

std::string tiny3() { return shared_dir() + "/models/tiny-gemma3"; }

eg::server::ServerOptions opts(int parallel = 1, size_t prefix_bytes = 0) {
  eg::server::ServerOptions o;
  o.scheduler.slots = parallel;
  o.scheduler.context_tokens = 1024;
  o.scheduler.prefix_cache_bytes = prefix_bytes;
  return o;
}

const std::string kSystem = "You are a careful historian. Answer in two sentences, plainly.";
const std::string kQuestion =
    "Tell me about the history of the Roman empire, from the founding of the city to the fall of "
    "the western half, and say which emperor you find the most interesting and why.";

json conversation(const std::string& user, int max_tokens) {
  json b = chat_body(user, max_tokens);
  b["messages"] = json::array({{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", user}}});
  return b;
}

// Polls until the metric reaches `value` (or 10 s).
bool wait_metric(const TestServer& s, const std::string& name, double value) {
  for (int i = 0; i < 1000; ++i) {
    if (s.metric(name) >= value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST(ServerDraft, RequestReusesTheDraftAndAnswersTheSame) {
  for (size_t prefix_bytes : {size_t{0}, size_t{64} << 20}) {
    SCOPED_TRACE(prefix_bytes ? "prefix cache on" : "prefix cache off");
    TestServer s(tiny3(), opts(2, prefix_bytes));
    // The reference: a fresh server, no draft.
    TestServer ref(tiny3(), opts(2, prefix_bytes));
    auto [st0, r0] = ref.post("/v1/chat/completions", conversation(kQuestion, 24));
    ASSERT_EQ(st0, 200) << r0.dump();
    EXPECT_EQ(r0["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

    // The user has typed most of the question: a draft.
    const std::string typed = kQuestion.substr(0, kQuestion.size() - 12);
    auto [st, d] = s.post("/v1/prefill", conversation(typed, 24));
    ASSERT_EQ(st, 200) << d.dump();
    EXPECT_EQ(d["object"], "prefill");
    EXPECT_EQ(d["queued"], true);
    const int stable = d["prefill_tokens"];
    EXPECT_GT(stable, 40);
    EXPECT_LT(stable, d["prompt_tokens"].get<int>() - 3);  // the held-back tail + the template's suffix
    ASSERT_TRUE(wait_metric(s, "edgegemma_draft_prefills_total", 1));
    EXPECT_EQ(s.metric("edgegemma_draft_prefill_tokens_total"), stable);

    // Enter: the whole question. Its prompt starts with the draft's stable tokens.
    auto [st1, r1] = s.post("/v1/chat/completions", conversation(kQuestion, 24));
    ASSERT_EQ(st1, 200) << r1.dump();
    const int cached = r1["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_GT(cached, stable - 4);  // the last tokens of the typed text may tokenize differently
    EXPECT_LE(cached, stable);
    EXPECT_EQ(r1["usage"]["prompt_tokens"], r0["usage"]["prompt_tokens"]);
    EXPECT_EQ(content_of(r1), content_of(r0));  // KV reuse is exact
    EXPECT_EQ(s.metric("edgegemma_draft_cache_hits_total"), 1);
    EXPECT_EQ(s.metric("edgegemma_draft_tokens_saved_total"), cached);
    EXPECT_EQ(s.metric("edgegemma_draft_requests_total"), 1);

    // A late draft (sent before Enter, run after the request): its tokens are already in the
    // conversation's slot, nothing is prefilled and the slot keeps the answer (the next turn
    // reuses it).
    auto [st2, d2] = s.post("/v1/prefill", conversation(typed, 24));
    ASSERT_EQ(st2, 200);
    ASSERT_TRUE(wait_metric(s, "edgegemma_draft_prefills_total", 2));
    EXPECT_EQ(s.metric("edgegemma_draft_prefill_tokens_total"), stable);
    json turn2 = conversation(kQuestion, 8);
    turn2["messages"].push_back({{"role", "assistant"}, {"content", content_of(r1)}});
    turn2["messages"].push_back({{"role", "user"}, {"content", "Thanks."}});
    auto [st3, r3] = s.post("/v1/chat/completions", turn2);
    ASSERT_EQ(st3, 200);
    EXPECT_GT(r3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), r1["usage"]["prompt_tokens"].get<int>());
  }
}

TEST(ServerDraft, NeverRunsWhileARequestHasWorkSupersededAndBounded) {
  eg::server::ServerOptions o = opts(1, size_t{64} << 20);  // prefix cache: drafts may replace the story's KV
  o.scheduler.max_drafts = 2;
  TestServer s(tiny3(), o);
  json longreq = chat_body("Write a very long story about the sea.", 600);
  longreq["ignore_eos"] = true;
  auto fut = std::async(std::launch::async, [&] { return s.post("/v1/chat/completions", longreq); });
  ASSERT_TRUE(wait_metric(s, "edgegemma_slots_busy", 1));
  // Client A sends three drafts (as the user types); B, C, D one each. With max_drafts 2: A's
  // first two are superseded, then the oldest pending ones go as B, C, D arrive.
  for (const char* t : {"Tell me", "Tell me about", "Tell me about the sea"}) {
    json b = conversation(t, 8);
    b["user"] = "A";
    auto [st, d] = s.post("/v1/prefill", b);
    ASSERT_EQ(st, 200) << d.dump();
  }
  EXPECT_EQ(s.metric("edgegemma_draft_dropped_total"), 2);
  for (const char* u : {"B", "C", "D"}) {
    json b = conversation(std::string("A question from ") + u + " about the weather in the mountains", 8);
    b["user"] = u;
    ASSERT_EQ(s.post("/v1/prefill", b).first, 200);
  }
  EXPECT_EQ(s.metric("edgegemma_draft_requests_total"), 6);
  EXPECT_EQ(s.metric("edgegemma_draft_dropped_total"), 4);  // A's last and B went; C, D pending
  // While the request decodes, no draft was prefilled.
  EXPECT_EQ(s.metric("edgegemma_slots_busy"), 1);
  EXPECT_EQ(s.metric("edgegemma_draft_prefill_tokens_total"), 0);
  auto [st, r] = fut.get();
  ASSERT_EQ(st, 200);
  EXPECT_EQ(r["usage"]["completion_tokens"], 600);
  // Then the two pending ones run.
  ASSERT_TRUE(wait_metric(s, "edgegemma_draft_prefills_total", 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(s.metric("edgegemma_draft_prefills_total"), 2);
  EXPECT_GT(s.metric("edgegemma_draft_prefill_tokens_total"), 20);
}

TEST(ServerDraft, ImagesNeedAVisionTowerAndBadBodiesAre400) {
  TestServer s(tiny3(), opts(1));  // no vision tower: a draft with an image is the request's 400
  const json image = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}};
  json b = conversation(kQuestion, 8);
  b["messages"].push_back({{"role", "assistant"}, {"content", "It was a long story, of many emperors."}});
  b["messages"].push_back({{"role", "user"}, {"content", json::array({image, {{"type", "text"}, {"text", "And this?"}}})}});
  auto [st, d] = s.post("/v1/prefill", b);
  EXPECT_EQ(st, 400) << d.dump();
  EXPECT_NE(d.dump().find("no vision tower"), std::string::npos) << d.dump();
  EXPECT_EQ(s.metric("edgegemma_draft_requests_total"), 0);

  auto [st3, e3] = s.post_raw("/v1/prefill", "{not json");
  EXPECT_EQ(st3, 400);
  auto [st4, e4] = s.post("/v1/prefill", json{{"model", "x"}});
  EXPECT_EQ(st4, 400) << e4.dump();
  EXPECT_EQ(e4["error"]["param"], "messages");
  json bad = conversation("hi", 8);
  bad["temperature"] = "hot";
  EXPECT_EQ(s.post("/v1/prefill", bad).first, 400);
  EXPECT_EQ(s.metric("edgegemma_draft_requests_total"), 0);
}

// One slot holding a conversation, no prefix cache: a late draft that diverges near its end (the
// user edited the text before Enter) would wipe the answer's KV for a few tokens: it is dropped.
TEST(ServerDraft, LateDraftKeepsTheConversation) {
  TestServer s(tiny3(), opts(1));
  const std::string edited = kQuestion.substr(0, kQuestion.size() - 30) + " which one of them, tell me";
  auto [st1, r1] = s.post("/v1/chat/completions", conversation(kQuestion, 24));
  ASSERT_EQ(st1, 200);
  auto [st2, d2] = s.post("/v1/prefill", conversation(edited, 24));
  ASSERT_EQ(st2, 200);
  ASSERT_EQ(d2["queued"], true);
  ASSERT_TRUE(wait_metric(s, "edgegemma_draft_dropped_total", 1));
  EXPECT_EQ(s.metric("edgegemma_draft_prefill_tokens_total"), 0);
  EXPECT_EQ(s.metric("edgegemma_draft_prefills_total"), 0);
  json turn2 = conversation(kQuestion, 8);
  turn2["messages"].push_back({{"role", "assistant"}, {"content", content_of(r1)}});
  turn2["messages"].push_back({{"role", "user"}, {"content", "Thanks."}});
  auto [st3, r3] = s.post("/v1/chat/completions", turn2);
  ASSERT_EQ(st3, 200);
  EXPECT_GT(r3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), r1["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(s.metric("edgegemma_draft_cache_hits_total"), 0);
}

TEST(ServerDraft, NeedsTheApiKey) {
  eg::server::ServerOptions o = opts(1);
  o.api_key = "sekret-draft";
  TestServer s(tiny3(), o);
  auto [st, e] = s.post("/v1/prefill", conversation(kQuestion, 8));
  EXPECT_EQ(st, 401) << e.dump();
  auto [st2, d] = s.post("/v1/prefill", conversation(kQuestion, 8), {{"Authorization", "Bearer sekret-draft"}});
  EXPECT_EQ(st2, 200) << d.dump();
  EXPECT_EQ(d["queued"], true);
}
