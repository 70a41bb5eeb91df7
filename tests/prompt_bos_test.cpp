// Every prompt that reaches a Gemma model starts with exactly one <bos> (engine/prompt_bos.h),
// also when the checkpoint's add_bos_token is false (the released Gemma 4 -it
// tokenizer_config.json says so, because its chat template writes "<bos>" itself): on the raw
// path (LoadedModel::encode_prompt, `run`, Session raw mode), the chat path (PromptEncoder,
// `run --chat`, Session chat mode), the server's /v1/completions and /v1/chat/completions
// requests, and a GGUF whose tokenizer.ggml.add_bos_token is false. --no-bos / "add_bos": false
// add none.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/loaded_model.h"
#include "engine/perplexity.h"
#include "engine/session.h"
#include "engine/session_prompt.h"
#include "format/gguf.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

constexpr int32_t kBos = 2;  // "<bos>" in every Gemma vocabulary (tokenizer_config.json: added_tokens_decoder "2")

std::string source_model() { return egtest::shared_dir() + "/models/tiny-gemma4"; }

// tiny-gemma4 with tokenizer_config.json's add_bos_token set to false (weights linked).
const std::string& no_bos_dir() {
  static const std::string dir = [] {
    const std::string d = egtest::make_temp_dir() + "/tiny-gemma4-add-bos-false";
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(source_model())) {
      const std::string name = e.path().filename().string();
      if (name == "model.safetensors") fs::create_symlink(e.path(), d + "/" + name);
      else if (name != "tokenizer_config.json") fs::copy_file(e.path(), d + "/" + name);
    }
    json cfg = json::parse(egtest::read_file(source_model() + "/tokenizer_config.json"));
    cfg["add_bos_token"] = false;
    egtest::write_file(d + "/tokenizer_config.json", cfg.dump(1));
    return d;
  }();
  return dir;
}

std::shared_ptr<const eg::LoadedModel> no_bos_model() {
  static std::shared_ptr<const eg::LoadedModel> m = eg::LoadedModel::load_dir(no_bos_dir());
  return m;
}

size_t leading_bos(const Ids& ids) {
  size_t n = 0;
  while (n < ids.size() && ids[n] == kBos) ++n;
  return n;
}

const char* kPrompt = "The capital of France is";

TEST(PromptBos, FixtureSaysAddBosFalse) {
  const eg::Tokenizer& tok = no_bos_model()->tokenizer();
  EXPECT_FALSE(tok.add_bos());
  ASSERT_EQ(tok.bos_id(), kBos);
  ASSERT_EQ(tok.piece(kBos), "<bos>");
  // HF's encode with this config adds none; that is what `tokenize` reproduces.
  EXPECT_NE(tok.encode(kPrompt, false).at(0), kBos);
}

TEST(PromptBos, RawPathHasExactlyOneBos) {
  const eg::LoadedModel& lm = *no_bos_model();
  const Ids plain = lm.tokenizer().encode(kPrompt, false);
  Ids want = {kBos};
  want.insert(want.end(), plain.begin(), plain.end());
  EXPECT_EQ(lm.encode_prompt(kPrompt, false), want);
  // Text that already starts with "<bos>" (once or twice): still exactly one.
  EXPECT_EQ(lm.encode_prompt(std::string("<bos>") + kPrompt, false), want);
  EXPECT_EQ(lm.encode_prompt(std::string("<bos><bos>") + kPrompt, false), want);
  // --no-bos: none added; the user's own "<bos>" stays.
  EXPECT_EQ(lm.encode_prompt(kPrompt, true), plain);
  EXPECT_EQ(lm.encode_prompt(std::string("<bos>") + kPrompt, true), want);
  // The tokenizer that says add_bos_token true gives the same prompt ids.
  auto with_bos = eg::LoadedModel::load_dir(source_model());
  EXPECT_EQ(with_bos->encode_prompt(kPrompt, false), want);
  EXPECT_EQ(with_bos->encode_prompt(kPrompt, true), plain);
}

TEST(PromptBos, ChatPathHasExactlyOneBos) {
  const eg::LoadedModel& lm = *no_bos_model();
  const eg::Tokenizer& tok = lm.tokenizer();
  eg::PromptEncoder enc(tok, lm.chat_template(), std::nullopt);
  const auto r = enc.render({eg::ChatMessage{"user", "Hello"}}, true);
  ASSERT_EQ(r.text.rfind("<bos>", 0), 0u) << "the template writes <bos> itself";
  const Ids ids = enc.encode(r.text, r.content);
  EXPECT_EQ(leading_bos(ids), 1u);
  EXPECT_EQ(ids, tok.encode(r.text, false, true));  // = apply_chat_template(tokenize=True)
  // A template that writes no <bos> gets one; add_bos false adds none.
  eg::PromptEncoder bare(tok, "{% for m in messages %}{{ m['content'] }}{% endfor %}", std::nullopt);
  const auto rb = bare.render({eg::ChatMessage{"user", "Hello"}}, true);
  const Ids plain = tok.encode("Hello", false, false);
  Ids want = {kBos};
  want.insert(want.end(), plain.begin(), plain.end());
  EXPECT_EQ(bare.encode(rb.text, rb.content), want);
  EXPECT_EQ(bare.encode(rb.text, rb.content, std::string::npos, false), plain);
  // A template that writes "<bos>" twice: one.
  eg::PromptEncoder twice(tok, "{{ bos_token }}{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
                          std::nullopt);
  const auto rt = twice.render({eg::ChatMessage{"user", "Hello"}}, true);
  EXPECT_EQ(twice.encode(rt.text, rt.content), want);
}

TEST(PromptBos, SessionRawAndChatHaveExactlyOneBos) {
  eg::SessionOptions raw_opt;
  raw_opt.chat = false;
  eg::Session raw(no_bos_model(), raw_opt);
  raw.append_text(kPrompt);
  ASSERT_FALSE(raw.context_tokens().empty());
  EXPECT_EQ(leading_bos(raw.context_tokens()), 1u);
  EXPECT_EQ(raw.context_tokens(), no_bos_model()->encode_prompt(kPrompt, false));

  eg::SessionOptions chat_opt;
  chat_opt.chat_template = no_bos_model()->chat_template();
  eg::Session chat(no_bos_model(), chat_opt);
  eg::GenerateParams gp;
  gp.max_new_tokens = 1;
  chat.chat("Hello", gp);
  EXPECT_EQ(leading_bos(chat.context_tokens()), 1u);
}

TEST(PromptBos, PerplexityKeepsItsBosConvention) {
  const Ids s = eg::document_stream(no_bos_model()->tokenizer(), "one document\n\n\nanother");
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(leading_bos(s), 1u);
  EXPECT_EQ(std::count(s.begin(), s.end(), kBos), 2);  // <bos> text <eos> per document
}

TEST(PromptBos, ServerRequestsHaveExactlyOneBos) {
  const eg::LoadedModel& lm = *no_bos_model();
  eg::PromptEncoder enc(lm.tokenizer(), lm.chat_template(), std::nullopt);
  const eg::server::RequestContext ctx{lm, enc, "m", 512, false};
  const Ids plain = lm.tokenizer().encode(kPrompt, false);
  Ids want = {kBos};
  want.insert(want.end(), plain.begin(), plain.end());

  json c = {{"prompt", kPrompt}};
  EXPECT_EQ(eg::server::parse_completion_request(c, ctx).prompt, want);
  c["prompt"] = std::string("<bos>") + kPrompt;
  EXPECT_EQ(eg::server::parse_completion_request(c, ctx).prompt, want);
  c["prompt"] = kPrompt;
  c["add_bos"] = false;
  EXPECT_EQ(eg::server::parse_completion_request(c, ctx).prompt, plain);
  c["add_bos"] = true;
  EXPECT_EQ(eg::server::parse_completion_request(c, ctx).prompt, want);

  json m = {{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})}};
  const Ids chat_ids = eg::server::parse_chat_request(m, ctx).prompt;
  EXPECT_EQ(leading_bos(chat_ids), 1u);
  m["add_bos"] = false;  // the template's own <bos> stays
  EXPECT_EQ(eg::server::parse_chat_request(m, ctx).prompt, chat_ids);

  // The field's type is validated: a 400 naming it.
  for (const json& bad : {json("no"), json(0), json::array()}) {
    for (json body : {c, m}) {
      body["add_bos"] = bad;
      try {
        if (body.contains("prompt")) eg::server::parse_completion_request(body, ctx);
        else eg::server::parse_chat_request(body, ctx);
        ADD_FAILURE() << "accepted add_bos " << bad.dump();
      } catch (const eg::server::ApiError& e) {
        EXPECT_EQ(e.status(), 400);
        EXPECT_EQ(e.param(), "add_bos");
        EXPECT_NE(std::string(e.what()).find("'add_bos' must be a boolean"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(PromptBos, CliRunRawAndChat) {
  auto run_json = [](std::vector<std::string> args) {
    args.insert(args.begin(), egtest::cli_path());
    args.push_back("--json");
    const egtest::CmdResult r = egtest::run_cmd(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const std::string dir = no_bos_dir();
  const Ids plain = no_bos_model()->tokenizer().encode(kPrompt, false);
  Ids want = {kBos};
  want.insert(want.end(), plain.begin(), plain.end());
  EXPECT_EQ(run_json({"run", "-m", dir, "-p", kPrompt, "-n", "1"})["prompt_ids"].get<Ids>(), want);
  EXPECT_EQ(run_json({"run", "-m", dir, "-p", std::string("<bos>") + kPrompt, "-n", "1"})["prompt_ids"].get<Ids>(), want);
  EXPECT_EQ(run_json({"run", "-m", dir, "-p", kPrompt, "-n", "1", "--no-bos"})["prompt_ids"].get<Ids>(), plain);
  const Ids chat = run_json({"run", "-m", dir, "--chat", "-p", "Hello", "-n", "1"})["prompt_ids"].get<Ids>();
  EXPECT_EQ(leading_bos(chat), 1u);
  // `tokenize` stays HF's encode: this config adds no <bos>.
  EXPECT_EQ(run_json({"tokenize", "-m", dir, kPrompt})["ids"].get<Ids>(), plain);
}

TEST(PromptBos, GgufWithAddBosFalse) {
  // The q8_0 GGUF of tiny-gemma4 rewritten with tokenizer.ggml.add_bos_token = false.
  const auto src = eg::GGUFFile::open(egtest::shared_dir() + "/models/gguf/tiny-gemma4/tiny-gemma4-q8_0.gguf");
  std::vector<std::pair<std::string, eg::GGUFValue>> kv;
  for (const auto& [k, v] : src->metadata())
    if (k != "tokenizer.ggml.add_bos_token") kv.emplace_back(k, v);
  kv.emplace_back("tokenizer.ggml.add_bos_token", eg::GGUFValue::boolean(false));
  std::vector<eg::GGUFTensorSpec> specs;
  for (const eg::GGUFTensor& t : src->tensors()) specs.push_back({t.name, t.dtype, t.ne});
  const std::string path = egtest::make_temp_dir() + "/no-bos.gguf";
  {
    eg::GGUFWriter w(path, kv, specs);
    for (const eg::GGUFTensor& t : src->tensors()) w.append(t.data, t.nbytes);
    w.finish();
  }
  auto lm = eg::LoadedModel::load_gguf(path);
  EXPECT_FALSE(lm->tokenizer().add_bos());
  const Ids plain = lm->tokenizer().encode(kPrompt, false);
  Ids want = {kBos};
  want.insert(want.end(), plain.begin(), plain.end());
  EXPECT_EQ(lm->encode_prompt(kPrompt, false), want);
  EXPECT_EQ(lm->encode_prompt(kPrompt, true), plain);
}

}  // namespace
