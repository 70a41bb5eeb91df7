// Images through `edgegemma serve`: OpenAI image_url parts with data: URLs (base64) on both
// multimodal fixtures — the answer equals the Session's (whose ids equal transformers',
// vision_session_test), whatever the part order, with no stale KV reuse between two images of the
// same size on one slot — and the 400s: remote URLs (offline by design), other schemes, bad
// base64, bad types, too many images, images outside user messages, a model without a vision
// tower. The base64 encoder here is the test's own (RFC 4648), independent of the server's decoder.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/session.h"
#include "server/api_error.h"
#include "server/image_input.h"
#include "server_test_util.h"
#include "vision/image.h"

using nlohmann::json;
using namespace egtest;

namespace {

std::string b64(const std::string& in) { return base64(in); }

std::string data_url(const std::string& file, const std::string& mime) {
  return "data:" + mime + ";base64," + b64(read_file(file));
}

json image_part(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }

json request(json content, int max_tokens = 16) {
  return {{"messages", json::array({{{"role", "user"}, {"content", std::move(content)}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

eg::server::ServerOptions opts(int prefill_chunk = 256) {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 1024;
  o.scheduler.kv.type = eg::KVType::F32;
  o.scheduler.prefill_chunk = prefill_chunk;
  o.max_body_bytes = 8 << 20;
  return o;
}

// The Session's answer to one image + "Describe this." (the reference of the server's answer).
std::pair<std::string, int> session_answer(const std::string& model_dir, const std::string& image, int n) {
  eg::SessionOptions so;
  so.kv.type = eg::KVType::F32;
  so.context_tokens = 1024;
  so.ignore_eos = true;
  eg::Session s(shared_model(model_dir), so);
  s.add_image(eg::vision::load_image_file(image));
  eg::GenerateParams g;
  g.max_new_tokens = n;
  const eg::TurnResult r = s.chat("Describe this.", g);
  return {r.text, r.stats.prompt_tokens};
}

}  // namespace

TEST(ServerVision, ImageUrlDataMatchesTheSession) {
  for (const std::string name : {"tiny-gemma4-mm", "tiny-gemma3-vision"}) {
    SCOPED_TRACE(name);
    const std::string M = shared_dir() + "/models/" + name;
    // Small prefill chunks: a Gemma 3 image block (16 rows) must still be prefilled as one.
    TestServer s(M, opts(5));
    const std::string shapes = M + "/inputs/img_shapes_640x480.jpg", rgba = M + "/inputs/img_rgba_256x192.png";
    const auto want = session_answer(M, shapes, 16);
    for (const bool text_first : {false, true}) {  // the message's images go before its text either way
      json content = json::array();
      if (text_first) content.push_back({{"type", "text"}, {"text", "Describe this."}});
      content.push_back(image_part(data_url(shapes, "image/jpeg")));
      if (!text_first) content.push_back({{"type", "text"}, {"text", "Describe this."}});
      auto [st, body] = s.post("/v1/chat/completions", request(content));
      ASSERT_EQ(st, 200) << body.dump();
      EXPECT_EQ(content_of(body), want.first);
      EXPECT_EQ(body["usage"]["prompt_tokens"], want.second);
    }
    // Another image of the same size on the same slot: its own answer, not the previous KV.
    const auto want2 = session_answer(M, rgba, 16);
    auto [st, body] = s.post("/v1/chat/completions",
                             request(json::array({image_part(data_url(rgba, "image/png")),
                                                  {{"type", "text"}, {"text", "Describe this."}}})));
    ASSERT_EQ(st, 200) << body.dump();
    EXPECT_EQ(content_of(body), want2.first);
    // Streaming works with images too.
    const auto events = s.stream("/v1/chat/completions",
                                 [&] {
                                   json r = request(json::array({image_part(data_url(rgba, "image/png")),
                                                                 {{"type", "text"}, {"text", "Describe this."}}}));
                                   r["stream"] = true;
                                   return r;
                                 }());
    EXPECT_EQ(joined_deltas(events), want2.first);
  }
}

// Images encoded on attach: a draft (POST /v1/prefill) with the image encodes it into the media
// cache; the request after Enter, and a later turn that sends the image again, find it there (no
// second encode) and answer exactly as the Session does; with the cache off every request encodes.
TEST(ServerVision, DraftEncodesTheImageOnceAndRequestsReuseIt) {
  for (const std::string name : {"tiny-gemma4-mm", "tiny-gemma3-vision"}) {
    SCOPED_TRACE(name);
    const std::string M = shared_dir() + "/models/" + name;
    const std::string shapes = M + "/inputs/img_shapes_640x480.jpg";
    const auto want = session_answer(M, shapes, 16);
    const json img = image_part(data_url(shapes, "image/jpeg"));
    TestServer s(M, opts());
    json draft = request(json::array({img, {{"type", "text"}, {"text", "Describe th"}}}));
    auto [sd, d] = s.post("/v1/prefill", draft);
    ASSERT_EQ(sd, 200) << d.dump();
    EXPECT_EQ(d["media"], 1);
    EXPECT_EQ(s.metric("edgegemma_media_cache_misses_total"), 1);
    EXPECT_EQ(s.metric("edgegemma_media_cache_inserted_total"), 1);
    EXPECT_EQ(s.metric("edgegemma_media_cache_entries"), 1);
    EXPECT_GT(s.metric("edgegemma_media_cache_bytes"), 1000);
    // A second draft of the same message (the next keystrokes) does not encode it again.
    ASSERT_EQ(s.post("/v1/prefill", draft).first, 200);
    EXPECT_EQ(s.metric("edgegemma_media_cache_hits_total"), 1);
    auto [st, body] = s.post("/v1/chat/completions", request(json::array({img, {{"type", "text"}, {"text", "Describe this."}}})));
    ASSERT_EQ(st, 200) << body.dump();
    EXPECT_EQ(content_of(body), want.first);
    EXPECT_EQ(body["usage"]["prompt_tokens"], want.second);
    EXPECT_EQ(s.metric("edgegemma_media_cache_hits_total"), 2);
    EXPECT_EQ(s.metric("edgegemma_media_cache_misses_total"), 1);

    eg::server::ServerOptions off = opts();
    off.media_cache_bytes = 0;
    TestServer s0(M, off);
    for (int i = 0; i < 2; ++i) {
      auto [st0, b0] = s0.post("/v1/chat/completions", request(json::array({img, {{"type", "text"}, {"text", "Describe this."}}})));
      ASSERT_EQ(st0, 200) << b0.dump();
      EXPECT_EQ(content_of(b0), want.first);
    }
    EXPECT_EQ(s0.metric("edgegemma_media_cache_hits_total"), 0);
    EXPECT_EQ(s0.metric("edgegemma_media_cache_entries"), 0);
  }
}

// KV reuse through an image: the second turn of a conversation that sends the same image again
// reuses the slot's KV past the image (the media cache gives it the same encoded image), and a
// draft with an image prefills through it; both answer exactly as a server without any reuse.
TEST(ServerVision, KvIsReusedThroughTheSameImage) {
  for (const std::string name : {"tiny-gemma4-mm", "tiny-gemma3-vision"}) {
    SCOPED_TRACE(name);
    const std::string M = shared_dir() + "/models/" + name;
    const std::string shapes = M + "/inputs/img_shapes_640x480.jpg";
    const json img = image_part(data_url(shapes, "image/jpeg"));
    const json turn1 = request(json::array({img, {{"type", "text"}, {"text", "Describe this."}}}));
    eg::server::ServerOptions fresh_opts = opts();
    fresh_opts.media_cache_bytes = 0;
    fresh_opts.scheduler.prefix_cache_bytes = 0;
    TestServer fresh(M, fresh_opts);  // the reference: nothing is ever reused there
    auto answer_fresh = [&](const json& r) {
      auto [st, b] = fresh.post("/v1/chat/completions", r);
      EXPECT_EQ(st, 200) << b.dump();
      // At most the few template tokens before the image (<bos><start_of_turn>user...).
      EXPECT_LT(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 8);
      return content_of(b);
    };

    eg::server::ServerOptions o = opts(7);  // small chunks: a Gemma 3 image is still prefilled whole
    o.scheduler.slots = 2;                    // the draft below takes the idle one
    TestServer s(M, o);
    auto [st1, b1] = s.post("/v1/chat/completions", turn1);
    ASSERT_EQ(st1, 200) << b1.dump();
    const int p1 = b1["usage"]["prompt_tokens"];
    json turn2 = turn1;
    turn2["messages"].push_back({{"role", "assistant"}, {"content", content_of(b1)}});
    turn2["messages"].push_back({{"role", "user"}, {"content", "And the colours?"}});
    auto [st2, b2] = s.post("/v1/chat/completions", turn2);
    ASSERT_EQ(st2, 200) << b2.dump();
    EXPECT_GE(b2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), p1 - 2);  // past the image
    EXPECT_EQ(content_of(b2), answer_fresh(turn2));

    // A draft of a new conversation with the image: prefilled through the image.
    json draft = request(json::array({img, {{"type", "text"}, {"text", "What shapes are in this pict"}}}));
    draft["messages"].insert(draft["messages"].begin(), json{{"role", "system"}, {"content", "Answer in one line."}});
    // Read before the POST: the draft can finish before the reply is even parsed here.
    const double t0 = s.metric("edgegemma_draft_prefills_total");
    auto [sd, d] = s.post("/v1/prefill", draft);
    ASSERT_EQ(sd, 200) << d.dump();
    ASSERT_EQ(d["queued"], true) << d.dump();
    for (int i = 0; i < 500 && s.metric("edgegemma_draft_prefills_total") == t0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_GT(s.metric("edgegemma_draft_prefills_total"), t0);
    json full = draft;
    full["messages"][1]["content"][1]["text"] = "What shapes are in this picture?";
    auto [st3, b3] = s.post("/v1/chat/completions", full);
    ASSERT_EQ(st3, 200) << b3.dump();
    EXPECT_GE(b3["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), d["prefill_tokens"].get<int>());
    EXPECT_GT(d["prefill_tokens"].get<int>(), b1["usage"]["prompt_tokens"].get<int>() / 2);  // the image is in it
    EXPECT_GE(s.metric("edgegemma_draft_cache_hits_total"), 1);
    EXPECT_EQ(content_of(b3), answer_fresh(full));
  }
}

TEST(ServerVision, BadImagesAre400) {
  const std::string M = shared_dir() + "/models/tiny-gemma4-mm";
  TestServer s(M, opts());
  const std::string png = M + "/inputs/img_gradient_224x224.png";
  auto expect_400 = [&](const json& content, const std::string& what, const char* role = "user") {
    json r = request(content);
    r["messages"][0]["role"] = role;
    auto [st, body] = s.post("/v1/chat/completions", r);
    EXPECT_EQ(st, 400) << what << ": " << body.dump();
    EXPECT_NE(body.dump().find(what), std::string::npos) << body.dump();
  };
  expect_400(json::array({image_part("https://example.com/cat.png")}), "offline by design");
  expect_400(json::array({image_part("http://example.com/cat.png")}), "offline by design");
  expect_400(json::array({image_part("file:///etc/passwd")}), "must be a data: URL");
  expect_400(json::array({image_part("data:image/png,rawbytes")}), "must be base64");
  expect_400(json::array({image_part("data:image/tiff;base64,AAAA")}), "unsupported image type");
  expect_400(json::array({image_part("data:image/png;base64,@@@@")}), "invalid base64");
  expect_400(json::array({image_part("data:image/png;base64," + b64(std::string(200, 'x')))}), "not an image");
  const std::string bytes = read_file(png);
  expect_400(json::array({image_part("data:image/png;base64," + b64(bytes.substr(0, bytes.size() / 2)))}), "image");
  expect_400(json::array({{{"type", "image_url"}}}), "needs 'image_url'");
  json nine = json::array();
  for (int i = 0; i < 9; ++i) nine.push_back(image_part(data_url(png, "image/png")));
  expect_400(nine, "too many images");
  expect_400(json::array({image_part(data_url(png, "image/png"))}), "only accepted in user messages", "system");
  // The server still answers afterwards.
  auto [st, body] = s.post("/v1/chat/completions", request(json::array({image_part(data_url(png, "image/png"))}), 4));
  EXPECT_EQ(st, 200) << body.dump();
}

TEST(ServerVision, TextOnlyModelSaysSo) {
  TestServer s(shared_dir() + "/models/tiny-gemma3", opts());
  const std::string png = shared_dir() + "/models/tiny-gemma4-mm/inputs/img_gradient_224x224.png";
  auto [st, body] = s.post("/v1/chat/completions", request(json::array({image_part(data_url(png, "image/png"))})));
  EXPECT_EQ(st, 400);
  EXPECT_NE(body.dump().find("this model has no vision tower"), std::string::npos) << body.dump();
}

TEST(ServerVision, DataUrlDecoding) {
  using eg::server::base64_decode;
  EXPECT_EQ(base64_decode(b64("hello!?"), 100), std::vector<uint8_t>({'h', 'e', 'l', 'l', 'o', '!', '?'}));
  EXPECT_EQ(base64_decode("aGk", 100), std::vector<uint8_t>({'h', 'i'}));  // unpadded
  EXPECT_THROW(base64_decode("aGk=x", 100), eg::Error);
  EXPECT_THROW(base64_decode("a", 100), eg::Error);
  EXPECT_THROW(base64_decode(b64(std::string(101, 'z')), 100), eg::Error);  // over the size limit
  const std::string png = shared_dir() + "/models/tiny-gemma4-mm/inputs/img_gradient_224x224.png";
  EXPECT_THROW(eg::server::image_from_url(data_url(png, "image/png"), "p", 1000), eg::server::ApiError);
  EXPECT_EQ(eg::server::image_from_url(data_url(png, "IMAGE/PNG"), "p").width, 224);
}
