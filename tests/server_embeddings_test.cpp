// POST /v1/embeddings in-process (server/embeddings.h): OpenAI's shapes, float and base64
// (little-endian float32) against the sentence-transformers reference of
// tests/fixtures/tiny-embeddinggemma, usage, Matryoshka dimensions, errors; an embeddings-only
// server answers chat routes with a 400; a chat server with an embedding model serves both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "embed/open.h"
#include "server/embeddings.h"
#include "server/image_input.h"
#include "server_test_util.h"

using nlohmann::json;

namespace {

std::string tiny_dir() { return egtest::source_dir() + "/tests/fixtures/tiny-embeddinggemma"; }

const json& reference() {
  static const json j = json::parse(egtest::read_file(tiny_dir() + "/reference.json"));
  return j;
}

std::shared_ptr<eg::embed::Embedder> embedder() {
  static std::shared_ptr<eg::embed::Embedder> e = eg::embed::open_embedder(tiny_dir());
  return e;
}

eg::server::ServerOptions options() {
  eg::server::ServerOptions o;
  o.embedder = embedder();
  o.embedding_model_id = "tiny-embeddinggemma";
  return o;
}

double max_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i].get<double>()));
  return m;
}

std::vector<float> from_base64(const std::string& s) {
  const std::vector<uint8_t> bytes = eg::server::base64_decode(s, 1 << 20);
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<float> v(bytes.size() / 4);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = uint32_t{bytes[4 * i]} | uint32_t{bytes[4 * i + 1]} << 8 | uint32_t{bytes[4 * i + 2]} << 16 |
                       uint32_t{bytes[4 * i + 3]} << 24;
    std::memcpy(&v[i], &u, 4);
  }
  return v;
}

}  // namespace

TEST(ServerEmbeddings, Base64EncodeKnownVectors) {
  auto enc = [](const std::string& s) { return eg::server::base64_encode(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  EXPECT_EQ(enc(""), "");
  EXPECT_EQ(enc("f"), "Zg==");
  EXPECT_EQ(enc("fo"), "Zm8=");
  EXPECT_EQ(enc("foo"), "Zm9v");
  EXPECT_EQ(enc("foobar"), "Zm9vYmFy");
  const float one = 1.0f;  // 0x3F800000, little-endian 00 00 80 3F
  EXPECT_EQ(eg::server::base64_encode(reinterpret_cast<const uint8_t*>(&one), 4), "AACAPw==");
}

TEST(ServerEmbeddings, FloatAndBase64MatchTheReference) {
  egtest::TestServer srv("", options());
  std::vector<std::string> texts;
  std::vector<const json*> cs;
  for (const json& c : reference()["cases"])
    if (c["prompt_name"].is_null()) {
      texts.push_back(c["text"]);
      cs.push_back(&c);
    }
  int tokens = 0;
  for (const json* c : cs) tokens += static_cast<int>((*c)["input_ids"].size());
  for (const char* fmt : {"float", "base64"}) {
    SCOPED_TRACE(fmt);
    auto [st, r] = srv.post("/v1/embeddings", json{{"model", "tiny-embeddinggemma"}, {"input", texts}, {"encoding_format", fmt}});
    ASSERT_EQ(st, 200) << r.dump();
    EXPECT_EQ(r["object"], "list");
    EXPECT_EQ(r["model"], "tiny-embeddinggemma");
    EXPECT_EQ(r["usage"]["prompt_tokens"], tokens);
    EXPECT_EQ(r["usage"]["total_tokens"], tokens);
    ASSERT_EQ(r["data"].size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const json& d = r["data"][i];
      EXPECT_EQ(d["object"], "embedding");
      EXPECT_EQ(d["index"], i);
      const std::vector<float> v = std::string(fmt) == "float" ? d["embedding"].get<std::vector<float>>()
                                                               : from_base64(d["embedding"]);
      EXPECT_LT(max_diff(v, (*cs[i])["encode"]), 2e-6);
      // Exactly the engine's vector, bit for bit.
      EXPECT_EQ(v, embedder()->embed({texts[i]}, {})[0].vector);
    }
  }
  // A single string, a task, a Matryoshka dimension.
  const json& q = reference()["cases"][1];
  ASSERT_EQ(q["prompt_name"], "query");
  auto [st, r] = srv.post("/v1/embeddings", json{{"input", q["text"]}, {"task", "query"}, {"dimensions", 32}});
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_LT(max_diff(r["data"][0]["embedding"].get<std::vector<float>>(), q["truncated"]["32"]), 2e-6);
  EXPECT_EQ(r["usage"]["prompt_tokens"], q["input_ids"].size());
  auto [st2, r2] = srv.post("/v1/embeddings", json{{"input", "x"}, {"dimensions", 64}});  // the full size
  EXPECT_EQ(st2, 200);
  EXPECT_EQ(r2["data"][0]["embedding"].size(), 64u);
}

TEST(ServerEmbeddings, BadRequestsAre400sNamingTheField) {
  egtest::TestServer srv("", options());
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"model", "x"}}, "input"},
      {json{{"input", json::array()}}, "input"},
      {json{{"input", json::array({1, 2})}}, "input"},
      {json{{"input", json::array({"a", 3})}}, "input"},
      {json{{"input", 7}}, "input"},
      {json{{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format"},
      {json{{"input", "x"}, {"dimensions", 20}}, "dimensions"},
      {json{{"input", "x"}, {"dimensions", "32"}}, "dimensions"},
      {json{{"input", "x"}, {"task", "nonsense"}}, "task"},
      {json{{"input", std::string(30000, 'a') + " z"}}, "input"},
  };
  for (const auto& [body, param] : bad) {
    auto [st, r] = srv.post("/v1/embeddings", body);
    EXPECT_EQ(st, 400) << body.dump().substr(0, 200);
    EXPECT_EQ(r["error"]["param"], param) << r.dump().substr(0, 300);
  }
  auto [st, r] = srv.post_raw("/v1/embeddings", "{not json");
  EXPECT_EQ(st, 400);
  // Still serving correctly afterwards.
  auto [ok, r2] = srv.post("/v1/embeddings", json{{"input", "fine"}});
  EXPECT_EQ(ok, 200);
}

TEST(ServerEmbeddings, EmbeddingsOnlyServerRefusesChatRoutes) {
  egtest::TestServer srv("", options());
  for (const char* route : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/v1/prefill"}) {
    auto [st, r] = srv.post(route, json{{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                                        {"prompt", "hi"}, {"content", "hi"}});
    EXPECT_EQ(st, 400) << route;
    EXPECT_NE(r["error"]["message"].get<std::string>().find("embedding model 'tiny-embeddinggemma'"), std::string::npos)
        << r.dump();
  }
  auto [st, models] = srv.get("/v1/models");
  ASSERT_EQ(st, 200);
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-embeddinggemma");
  EXPECT_EQ(models["data"][0]["supported_dimensions"], json::array({64, 32, 16}));
  EXPECT_EQ(srv.get("/health").first, 200);
}

TEST(ServerEmbeddings, ChatServerWithEmbeddingModelServesBoth) {
  egtest::TestServer srv(egtest::shared_dir() + "/models/tiny-gemma3", options());
  auto [cs, chat] = srv.post("/v1/chat/completions", egtest::chat_body("Hello", 3));
  EXPECT_EQ(cs, 200) << chat.dump();
  auto [es, emb] = srv.post("/v1/embeddings", json{{"input", "Hello"}});
  EXPECT_EQ(es, 200) << emb.dump();
  auto [ms, models] = srv.get("/v1/models");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(srv.get("/v1/models/tiny-embeddinggemma").first, 200);
  // Without an embedding model the route is a clear 400.
  egtest::TestServer plain(egtest::shared_dir() + "/models/tiny-gemma3", {});
  auto [ps, pr] = plain.post("/v1/embeddings", json{{"input", "Hello"}});
  EXPECT_EQ(ps, 400);
  EXPECT_NE(pr["error"]["message"].get<std::string>().find("no embedding model"), std::string::npos);
}
