// Gemma 3 chat template: byte-for-byte agreement with the real Jinja template as transformers
// renders it (fixtures from tests/fixtures/gen_gemma3_chat.py).
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::json;

std::vector<eg::ChatMessage> to_messages(const json& msgs) {
  std::vector<eg::ChatMessage> out;
  for (const json& m : msgs) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(Gemma3ChatTemplate, MatchesJinjaRendering) {
  const json fx = json::parse(egtest::read_file(egtest::source_dir() + "/tests/fixtures/gemma3_chat_cases.json"));
  int rendered = 0, raised = 0;
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto msgs = to_messages(c["messages"]);
    const bool gen = c["add_generation_prompt"];
    const std::string bos = c["bos_token"];
    if (c.contains("error") || c.value("cpp_rejects", false)) {
      EXPECT_THROW(eg::render_gemma3_chat(msgs, gen, bos), eg::Error);
      ++raised;
    } else {
      EXPECT_EQ(eg::render_gemma3_chat(msgs, gen, bos), c["text"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 160);
  EXPECT_GE(raised, 8);
}

TEST(Gemma3ChatTemplate, TinyModelChatPrompt) {
  // chat_fortune was rendered by the tiny model's own template (equivalent to Gemma 3's) and
  // encoded with add_special_tokens=False.
  const std::string dir = egtest::shared_dir() + "/models/tiny-gemma3";
  const json ref = json::parse(egtest::read_file(dir + "/reference.json"));
  const json* prompt = nullptr;
  for (const json& p : ref["prompts"])
    if (p["id"] == "chat_fortune") prompt = &p;
  ASSERT_NE(prompt, nullptr);
  const std::string text = eg::render_gemma3_chat({{"user", "Tell me a fortune."}}, true);
  EXPECT_EQ(text, (*prompt)["text"].get<std::string>());
  EXPECT_FALSE((*prompt)["add_special_tokens"].get<bool>());
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(dir);
  EXPECT_EQ(tok.encode(text, /*add_bos=*/false), (*prompt)["input_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.encode(text, false).front(), tok.bos_id());  // exactly one BOS
}

TEST(Gemma3ChatTemplate, Basics) {
  EXPECT_EQ(eg::render_gemma3_chat({{"system", "Be terse."}, {"user", "  Hi \n"}, {"assistant", "Hello."}}, true),
            "<bos><start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(eg::render_gemma3_chat({{"user", "x"}}, false), "<bos><start_of_turn>user\nx<end_of_turn>\n");
}

TEST(Gemma3ChatTemplate, Errors) {
  using M = std::vector<eg::ChatMessage>;
  EXPECT_THROW(eg::render_gemma3_chat(M{}, true), eg::Error);
  EXPECT_THROW(eg::render_gemma3_chat(M{{"assistant", "a"}}, true), eg::Error);
  EXPECT_THROW(eg::render_gemma3_chat(M{{"user", "a"}, {"user", "b"}}, true), eg::Error);
  EXPECT_THROW(eg::render_gemma3_chat(M{{"system", "s"}, {"assistant", "b"}}, true), eg::Error);
  EXPECT_THROW(eg::render_gemma3_chat(M{{"user", "a"}, {"tool", "b"}}, true), eg::Error);
  EXPECT_THROW(eg::render_gemma3_chat(M{{"User", "a"}}, true), eg::Error);
  try {
    eg::render_gemma3_chat(M{{"user", "a"}, {"model", "b"}}, true);
    ADD_FAILURE() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model"), std::string::npos) << e.what();
  }
}

}  // namespace
