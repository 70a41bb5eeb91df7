// Chat templates rendered by our Jinja interpreter, byte for byte against transformers'
// apply_chat_template (fixtures from tools/gen_chat_template_fixtures.py and, for the earlier
// Gemma 3 cases, tests/fixtures/gen_gemma3_chat.py), plus the fold rule and template loading.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string shared_template(const std::string& rel) {
  const std::string path = egtest::shared_dir() + "/" + rel;
  if (rel.size() > 5 && rel.substr(rel.size() - 5) == ".json")
    return json::parse(egtest::read_file(path))["chat_template"].get<std::string>();
  return egtest::read_file(path);
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string render(const eg::ChatTemplate& t, const ojson& msgs, const eg::ChatOptions& opt) {
  return t.render(msgs, opt);
}

TEST(ChatTemplate, MatchesTransformers) {
  const ojson fx = ojson::parse(egtest::read_file(egtest::source_dir() + "/tests/fixtures/chat_template_cases.json"));
  std::map<std::string, std::unique_ptr<eg::ChatTemplate>> templates;
  for (auto it = fx["templates"].begin(); it != fx["templates"].end(); ++it) {
    const std::string src = shared_template(it.value()["path"].get<std::string>());
    ASSERT_EQ(code_points(src), it.value()["source_length"].get<size_t>()) << it.key() << ": template changed";
    templates[it.key()] = std::make_unique<eg::ChatTemplate>(src);
  }
  std::map<std::string, int> rendered, raised, folded;
  for (const ojson& c : fx["cases"]) {
    const std::string tname = c["template"].get<std::string>();
    SCOPED_TRACE(tname + ": " + c["name"].get<std::string>());
    const eg::ChatTemplate& t = *templates.at(tname);
    const ojson& msgs = fx["conversations"][c["conversation"].get<size_t>()];
    eg::ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (c.contains("enable_thinking")) opt.enable_thinking = c["enable_thinking"].get<bool>();
    if (c.contains("tools")) opt.tools = fx["tool_sets"][c["tools"].get<std::string>()];
    if (c.contains("bos_token")) opt.bos_token = c["bos_token"].get<std::string>();
    eg::ChatOptions no_fold = opt;
    no_fold.fold_system = false;
    if (c.contains("text")) {
      EXPECT_EQ(render(t, msgs, opt), c["text"].get<std::string>());
      ++rendered[tname];
      continue;
    }
    EXPECT_THROW(render(t, msgs, no_fold), eg::Error) << c["error"];
    ++raised[tname];
    if (c.contains("folded_text")) {
      EXPECT_EQ(render(t, msgs, opt), c["folded_text"].get<std::string>());
      ++folded[tname];
    } else {
      EXPECT_THROW(render(t, msgs, opt), eg::Error);
    }
  }
  for (const auto& [name, _] : templates) {
    std::printf("%-24s %4d rendered, %3d raise, %3d folded\n", name.c_str(), rendered[name], raised[name],
                folded[name]);
    EXPECT_GE(rendered[name], 50) << name;
  }
  EXPECT_GE(raised["gemma2"], 100);
  EXPECT_GE(folded["gemma2"], 80);
  EXPECT_GE(raised["gemma3"], 20);
}

TEST(ChatTemplate, EarlierGemma3Fixture) {
  // The cases of the former hand-written Gemma 3 renderer, through the real templates now.
  // (cpp_rejects marked an unknown role the old renderer refused; Jinja renders it, as we do.)
  const json fx = json::parse(egtest::read_file(egtest::source_dir() + "/tests/fixtures/gemma3_chat_cases.json"));
  const eg::ChatTemplate gemma3(shared_template("templates/google-gemma-3-it.jinja"));
  const eg::ChatTemplate tiny(shared_template("tokenizers/tiny-gemma/tokenizer_config.json"));
  int rendered = 0, raised = 0;
  for (const json& c : fx["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    eg::ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    opt.bos_token = c["bos_token"].get<std::string>();
    if (c.contains("error")) {
      EXPECT_THROW(gemma3.render(c["messages"], opt), eg::Error);
      ++raised;
    } else {
      EXPECT_EQ(gemma3.render(c["messages"], opt), c["text"].get<std::string>());
      if (!c["messages"].empty()) {
        EXPECT_EQ(tiny.render(c["messages"], opt), c["text"].get<std::string>());
      }
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 160);
  EXPECT_GE(raised, 6);
}

TEST(ChatTemplate, TinyModelChatPrompt) {
  // chat_fortune was rendered by transformers with the tiny model's own template and encoded
  // with add_special_tokens=False.
  const std::string dir = egtest::shared_dir() + "/models/tiny-gemma3";
  const json ref = json::parse(egtest::read_file(dir + "/reference.json"));
  const json* prompt = nullptr;
  for (const json& p : ref["prompts"])
    if (p["id"] == "chat_fortune") prompt = &p;
  ASSERT_NE(prompt, nullptr);
  const eg::ChatTemplate t(eg::load_chat_template(dir));
  const std::string text = t.render(json::array({{{"role", "user"}, {"content", "Tell me a fortune."}}}), {});
  EXPECT_EQ(text, (*prompt)["text"].get<std::string>());
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(dir);
  EXPECT_EQ(tok.chat_template(), eg::load_chat_template(dir));
  EXPECT_EQ(tok.encode(text, /*add_bos=*/false), (*prompt)["input_ids"].get<std::vector<int32_t>>());
}

TEST(ChatTemplate, FoldsSystemWhenTemplateRejectsIt) {
  const eg::ChatTemplate gemma2(shared_template("templates/google-gemma-2-2b-it.jinja"));
  const eg::ChatTemplate gemma3(shared_template("templates/google-gemma-3-it.jinja"));
  const json conv = json::parse(R"([{"role": "system", "content": "Be terse."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": "Bye"}])");
  // Gemma 2 and 3 share the turn markers: folded Gemma 2 == Gemma 3's own system handling.
  EXPECT_EQ(gemma2.render(conv, {}), gemma3.render(conv, {}));
  EXPECT_EQ(gemma2.render(conv, {}),
            "<bos><start_of_turn>user\nBe terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  eg::ChatOptions no_fold;
  no_fold.fold_system = false;
  try {
    gemma2.render(conv, no_fold);
    ADD_FAILURE() << "no error";
  } catch (const eg::jinja::TemplateRaise& e) {
    EXPECT_EQ(e.message(), "System role not supported");
    EXPECT_STREQ(e.what(), "chat template: System role not supported");
  }
  // Parts: the system text becomes a leading text part of the user content.
  const eg::ChatTemplate parts(
      "{% for m in messages %}{{ m.role }}:{% for p in m.content %}[{{ p.text }}]"
      "{% endfor %}{% endfor %}{% if messages[0].role == 'system' %}"
      "{{ raise_exception('no system') }}{% endif %}");
  EXPECT_EQ(parts.render(json::parse(R"([{"role": "system", "content": [{"type": "text", "text": "S1"},
      {"type": "image"}, {"type": "text", "text": "S2"}]}, {"role": "user", "content": [{"type": "text", "text": "U"}]}])"),
                         {}),
            "user:[S1S2\n\n][U]");
  // Not folded: no user message after the system message, or an error other than raise_exception().
  EXPECT_THROW(gemma2.render(json::parse(R"([{"role": "system", "content": "s"}])"), {}), eg::jinja::TemplateRaise);
  EXPECT_THROW(
      gemma2.render(json::parse(R"([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])"), {}),
      eg::jinja::TemplateRaise);
  const eg::ChatTemplate undefined_error("{{ messages[0].content + undefined_name }}");
  EXPECT_THROW(undefined_error.render(conv, {}), eg::Error);
  // The folded rendering's own error is what comes out when it fails too.
  try {
    gemma2.render(json::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
        {"role": "user", "content": "b"}])"),
                  {});
    ADD_FAILURE() << "no error";
  } catch (const eg::jinja::TemplateRaise& e) {
    EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplate, Options) {
  const eg::ChatTemplate t(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ enable_thinking is defined }}"
      "|{{ enable_thinking }}|{{ tools | length if tools is not none else 'none' }}|{{ documents }}|{{ extra_var }}");
  const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(t.render(msgs, {}), "<bos>|<eos>|True|False||none|None|");
  eg::ChatOptions o;
  o.add_generation_prompt = false;
  o.enable_thinking = false;
  o.tools = ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.extra = {{"extra_var", "v"}, {"bos_token", "<B>"}};
  EXPECT_EQ(t.render(msgs, o), "<B>|</s>|False|True|False|1|None|v");
  o.tools = ojson::object();
  EXPECT_THROW(t.render(msgs, o), eg::Error);
  EXPECT_THROW(t.render(json::object(), {}), eg::Error);
  EXPECT_THROW(t.render(json::array(), {}), eg::Error);  // transformers raises too
}

TEST(ChatTemplate, KeyOrderOfOrderedJson) {
  const eg::ChatTemplate t("{{ messages[0] | tojson }}");
  EXPECT_EQ(t.render(ojson::parse(R"([{"role": "user", "content": "x"}])"), {}), R"({"role": "user", "content": "x"})");
  EXPECT_EQ(t.render(json::parse(R"([{"role": "user", "content": "x"}])"), {}), R"({"content": "x", "role": "user"})");
}

TEST(ChatTemplate, LoadFromModelDir) {
  const std::string dir = egtest::make_temp_dir();
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  try {
    eg::load_chat_template(dir);
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model has no chat template"), std::string::npos) << e.what();
  }
  egtest::write_file(dir + "/tokenizer_config.json", R"({"bos_token": "<bos>"})");
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  egtest::write_file(dir + "/tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  egtest::write_file(dir + "/tokenizer_config.json", R"({"chat_template": "A{{ x }}"})");
  EXPECT_EQ(eg::load_chat_template(dir), "A{{ x }}");
  egtest::write_file(
      dir + "/tokenizer_config.json",
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(eg::load_chat_template(dir), "D");
  egtest::write_file(dir + "/tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})");
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  egtest::write_file(dir + "/tokenizer_config.json", R"({"chat_template": 3})");
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  egtest::write_file(dir + "/tokenizer_config.json", "{not json");
  EXPECT_THROW(eg::load_chat_template(dir), eg::Error);
  egtest::write_file(dir + "/chat_template.jinja", "J");  // takes precedence
  EXPECT_EQ(eg::load_chat_template(dir), "J");
}

TEST(ChatTemplate, RejectsUnsupportedTemplates) {
  try {
    eg::ChatTemplate t("{% for m in messages %}\n{{ m | wordwrap }}{% endfor %}");
    ADD_FAILURE() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_STREQ(e.what(), "chat template: unsupported Jinja feature 'filter wordwrap' at line 2");
  }
  EXPECT_THROW(eg::ChatTemplate("{% include 'x' %}"), eg::Error);
  EXPECT_THROW(eg::ChatTemplate("{% if %}"), eg::Error);
}

}  // namespace
