// The server end to end: prompts start with exactly one <bos> on a checkpoint whose
// add_bos_token is false ("add_bos": false adds none; a non-boolean is a 400), and the streamed
// (SSE) text of an answer made of byte-fallback pieces equals the non-streamed text and HF's
// decode of the generated ids, a dangling byte run at the end included.
#include <gtest/gtest.h>

#include <filesystem>

#include "kv/kv_cache.h"
#include "engine/sampler.h"
#include "server_test_util.h"

using json = nlohmann::json;
using namespace egtest;
namespace fs = std::filesystem;

namespace {

const std::string kPrompt = "The capital of France is";

// tiny-gemma4 with tokenizer_config.json's add_bos_token set to false (weights linked).
const std::string& no_bos_dir() {
  static const std::string dir = [] {
    const std::string src = shared_dir() + "/models/tiny-gemma4";
    const std::string d = make_temp_dir() + "/tiny-gemma4-add-bos-false";
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(src)) {
      const std::string name = e.path().filename().string();
      if (name == "model.safetensors") fs::create_symlink(e.path(), d + "/" + name);
      else if (name != "tokenizer_config.json") fs::copy_file(e.path(), d + "/" + name);
    }
    json cfg = json::parse(read_file(src + "/tokenizer_config.json"));
    cfg["add_bos_token"] = false;
    write_file(d + "/tokenizer_config.json", cfg.dump(1));
    return d;
  }();
  return dir;
}

eg::server::ServerOptions opts() {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 512;
  o.scheduler.kv.type = eg::KVType::F32;
  return o;
}

}  // namespace

TEST(ServerBos, CompletionsAndChatStartWithOneBos) {
  TestServer s(no_bos_dir(), opts());
  auto lm = shared_model(no_bos_dir());
  ASSERT_FALSE(lm->tokenizer().add_bos());
  const size_t plain = lm->tokenizer().encode(kPrompt, false).size();
  auto prompt_tokens = [&](json body) {
    auto [st, r] = s.post("/v1/completions", body);
    EXPECT_EQ(st, 200) << r.dump();
    return r["usage"]["prompt_tokens"].get<size_t>();
  };
  const json base = {{"prompt", kPrompt}, {"max_tokens", 1}, {"temperature", 0}};
  EXPECT_EQ(prompt_tokens(base), plain + 1);
  json b = base;
  b["prompt"] = "<bos>" + kPrompt;
  EXPECT_EQ(prompt_tokens(b), plain + 1);
  b = base;
  b["add_bos"] = false;
  EXPECT_EQ(prompt_tokens(b), plain);
  b["add_bos"] = "false";
  auto [st, err] = s.post("/v1/completions", b);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(err["error"]["param"], "add_bos") << err.dump();

  // Chat: the template writes "<bos>"; exactly that one reaches the model.
  auto [cst, c] = s.post("/v1/chat/completions", chat_body("Hello", 1));
  ASSERT_EQ(cst, 200) << c.dump();
  const std::string rendered = "<bos><|turn>user\nHello<turn|>\n<|turn>model\n";
  EXPECT_EQ(c["usage"]["prompt_tokens"].get<size_t>(), lm->tokenizer().encode(rendered, false, true).size());
}

TEST(ServerUtf8, StreamedByteRunsEqualHfDecode) {
  TestServer s(no_bos_dir(), opts());
  auto lm = shared_model(no_bos_dir());
  const eg::Tokenizer& tok = lm->tokenizer();
  // Push the answer onto byte pieces: the model picks among them (greedy), giving valid and
  // invalid runs; the answer ends inside a run.
  std::vector<int32_t> biased;
  for (const char* p : {"<0xE5>", "<0x8F>", "<0xAB>", "<0x80>"}) biased.push_back(tok.token_id(p));
  json bias = json::object();
  for (int32_t id : biased) bias[std::to_string(id)] = 100;
  const int n = 12;
  const json body = {{"prompt", kPrompt}, {"max_tokens", n}, {"temperature", 0}, {"logit_bias", bias}};

  // The ids the server generates, computed here: greedy over the biased logits.
  std::vector<int32_t> ids = lm->encode_prompt(kPrompt, false);
  eg::KVCacheOptions ko;
  ko.type = eg::KVType::F32;
  ko.max_tokens = static_cast<int>(ids.size()) + n + 1;
  eg::KVCache kv(lm->model().config(), ko);
  eg::ForwardScratch scratch;
  std::vector<float> logits;
  lm->model().forward(ids.data(), static_cast<int>(ids.size()), kv, scratch, eg::LogitsMode::Last, logits);
  std::vector<int32_t> gen;
  for (int i = 0; i < n; ++i) {
    for (int32_t id : biased) logits[id] += 100;
    const int32_t next = eg::argmax(logits.data(), static_cast<int>(logits.size()));
    gen.push_back(next);
    lm->model().forward(&next, 1, kv, scratch, eg::LogitsMode::Last, logits);
  }
  const std::string want = tok.decode(gen);  // HF's rule (tokenizer tests check decode against it)

  auto [st, r] = s.post("/v1/completions", body);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], want) << json(gen).dump();
  json sb = body;
  sb["stream"] = true;
  std::string streamed;
  for (const json& e : s.stream("/v1/completions", sb))
    if (e.is_object() && !e["choices"].empty()) streamed += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, want) << json(gen).dump();
}
