// The edgegemma CLI end to end: `run` reproduces transformers' greedy ids, `--chat` renders the
// template with exactly one BOS, sampling is reproducible, and every bad input gives one clear
// error line and a non-zero exit (never a crash).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string tiny() { return egtest::shared_dir() + "/models/tiny-gemma3"; }
json reference() { return json::parse(egtest::read_file(tiny() + "/reference.json")); }

json run_json(std::vector<std::string> args, const std::string& stdin_text = "") {
  args.insert(args.begin(), egtest::cli_path());
  args.push_back("--json");
  egtest::CmdResult r = egtest::run_cmd(args, stdin_text);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

// Runs a failing command: exit code 1 (not a signal), one "edgegemma: error:" line on stderr.
std::string expect_error(std::vector<std::string> args, const std::string& needle, const std::string& stdin_text = "",
                         int exit_code = 1) {
  args.insert(args.begin(), egtest::cli_path());
  egtest::CmdResult r = egtest::run_cmd(args, stdin_text);
  EXPECT_EQ(r.exit_code, exit_code) << "stderr: " << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
  EXPECT_EQ(r.err.rfind("edgegemma: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  return r.err;
}

TEST(Cli, RunReproducesTransformersGreedyIds) {
  for (const char* model : {"tiny-gemma3", "tiny-gemma2", "tiny-gemma4", "tiny-gemma4-moe"}) {
    const std::string dir = egtest::shared_dir() + "/models/" + model;
    const json ref = json::parse(egtest::read_file(dir + "/reference.json"));
    for (const auto& p : ref["prompts"]) {
      const bool chat = p["id"] == "chat_fortune";
      std::vector<std::string> args = {"run", "-m", dir, "-p", p["text"], "-n", "40", "--ignore-eos"};
      if (chat) args.push_back("--no-bos");  // the text already carries <bos>
      const json j = run_json(args);
      EXPECT_EQ(j["prompt_ids"], p["input_ids"]) << model << " " << p["id"];
      EXPECT_EQ(j["generated_ids"], p["greedy_new_ids"]) << model << " " << p["id"];
      EXPECT_EQ(j["text"], p["greedy_text"]) << model << " " << p["id"];
      EXPECT_TRUE(j["stats"].contains("ttft_ms"));
    }
  }
}

TEST(Cli, ChatTemplateAddsExactlyOneBos) {
  json want;
  const json ref = reference();
  for (const auto& p : ref["prompts"])
    if (p["id"] == "chat_fortune") want = p;
  const json j = run_json({"run", "-m", tiny(), "--chat", "-p", "Tell me a fortune.", "-n", "40", "--ignore-eos"});
  EXPECT_EQ(j["prompt_ids"], want["input_ids"]);
  EXPECT_EQ(j["generated_ids"], want["greedy_new_ids"]);
  // Text that already starts with <bos> still gets one BOS.
  const json k = run_json({"run", "-m", tiny(), "-p", "<bos>Hello", "-n", "1"});
  EXPECT_EQ(k["prompt_ids"][0], 2);
  EXPECT_NE(k["prompt_ids"][1], 2);
}

TEST(Cli, SystemTextIsFoldedIntoFirstUserTurn) {
  const json j = run_json({"run", "-m", tiny(), "--chat", "--system", "Be brief.", "-p", "Hi", "-n", "1"});
  const json t = run_json({"tokenize", "-m", tiny(), "--no-bos",
                           "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"});
  EXPECT_EQ(j["prompt_ids"], t["ids"]);
}

TEST(Cli, StopsAtEndOfTurnWithoutIgnoreEos) {
  const json j = run_json({"run", "-m", tiny(), "--chat", "-p", "Tell me a fortune.", "-n", "200"});
  if (j["finish_reason"] == "stop") {
    const int last = j["generated_ids"].back();
    EXPECT_TRUE(last == 1 || last == 106) << last;
    EXPECT_EQ(j["text"].get<std::string>().find("<end_of_turn>"), std::string::npos);
  } else {
    EXPECT_EQ(j["generated_ids"].size(), 200u);
  }
}

TEST(Cli, SameSeedSameTextAndPromptSources) {
  const std::vector<std::string> base = {"run", "-m", tiny(), "-n", "24", "--temp", "0.9", "--top-k", "40",
                                         "--top-p", "0.95", "--min-p", "0.02", "--seed"};
  auto with_seed = [&](const char* s, std::vector<std::string> extra) {
    auto a = base;
    a.push_back(s);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const json a = run_json(with_seed("7", {"-p", "The sea"}));
  const json b = run_json(with_seed("7", {"-p", "The sea"}));
  const json c = run_json(with_seed("8", {"-p", "The sea"}));
  EXPECT_EQ(a["generated_ids"], b["generated_ids"]);
  EXPECT_NE(a["generated_ids"], c["generated_ids"]);
  // -f FILE and stdin give the same prompt as -p.
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/p.txt", "The sea");
  EXPECT_EQ(run_json(with_seed("7", {"-f", dir + "/p.txt"}))["generated_ids"], a["generated_ids"]);
  EXPECT_EQ(run_json(with_seed("7", {}), "The sea")["generated_ids"], a["generated_ids"]);
}

TEST(Cli, StreamedTextEqualsJsonText) {
  egtest::CmdResult r = egtest::run_cmd({egtest::cli_path(), "run", "-m", tiny(), "-p", "床前明月光，", "-n", "30", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = run_json({"run", "-m", tiny(), "-p", "床前明月光，", "-n", "30", "--ignore-eos"});
  EXPECT_EQ(r.out, j["text"].get<std::string>() + "\n");
}

TEST(Cli, DefaultModelIsBundled) {
  egtest::CmdResult r = egtest::run_cmd({egtest::cli_path(), "run", "-p", "In the beginning", "-n", "5", "--stats"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("TTFT"), std::string::npos);
  EXPECT_NE(r.err.find("peak RSS"), std::string::npos);
}

TEST(Cli, TokenizeJson) {
  const json t = run_json({"tokenize", "-m", tiny(), "Hello world"});
  ASSERT_EQ(t["ids"].size(), t["pieces"].size());
  EXPECT_EQ(t["ids"][0], 2);
  EXPECT_EQ(t["pieces"][0], "<bos>");
  const json u = run_json({"tokenize", "-m", tiny(), "--no-bos", "<start_of_turn>user"});
  EXPECT_EQ(u["ids"][0], 105);  // special-token text is parsed as the special token
}

TEST(Cli, TokenizeFromGgufEqualsTokenizerJson) {
  // The reference prompts' ids from the GGUF's own tokenizer metadata (llama.cpp's file) equal
  // the tokenizer.json path's, and reference.json's (transformers) ids.
  const std::string gguf = egtest::shared_dir() + "/models/gguf/tiny-gemma3/tiny-gemma3-q4_0.gguf";
  const json ref = reference();  // (iterating reference()["prompts"] directly would dangle)
  for (const json& p : ref["prompts"]) {
    if (!p.value("add_special_tokens", true)) continue;
    const std::string text = p["text"];
    const json a = run_json({"tokenize", "-m", gguf, text});
    const json b = run_json({"tokenize", "-m", tiny(), text});
    EXPECT_EQ(a["ids"], b["ids"]) << text;
    EXPECT_EQ(a["ids"], p["input_ids"]) << text;
  }
}

// --- every error case: one clear line, exit 1, no crash --------------------------------------

// A copy of tiny-gemma3 in a temp dir whose files the test may break.
std::string copy_model() {
  const std::string dir = egtest::make_temp_dir() + "/m";
  fs::create_directory(dir);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    fs::copy_file(tiny() + "/" + f, dir + "/" + f);
    fs::permissions(dir + "/" + f, fs::perms::owner_write, fs::perm_options::add);
  }
  return dir;
}

TEST(CliErrors, BadPaths) {
  expect_error({"run", "-m", "/nonexistent/model", "-p", "x"}, "does not exist");
  std::string d = copy_model();
  fs::remove(d + "/config.json");
  expect_error({"run", "-m", d, "-p", "x"}, "config.json");
  d = copy_model();
  fs::remove(d + "/tokenizer.json");
  expect_error({"run", "-m", d, "-p", "x"}, "tokenizer.json");
  d = copy_model();
  fs::remove(d + "/model.safetensors");
  expect_error({"run", "-m", d, "-p", "x"}, "safetensors");
  expect_error({"run", "-m", tiny(), "-f", "/nonexistent/prompt.txt"}, "cannot read");
}

TEST(CliErrors, CorruptSafetensors) {
  const std::string orig = egtest::read_file(tiny() + "/model.safetensors");
  uint64_t hlen = 0;
  std::memcpy(&hlen, orig.data(), 8);
  std::string d = copy_model();
  // Truncated: cut in the middle of the data.
  egtest::write_file(d + "/model.safetensors", orig.substr(0, orig.size() / 2));
  expect_error({"run", "-m", d, "-p", "x"}, "model.safetensors");
  // Header length larger than the file.
  std::string bad = orig;
  const uint64_t huge = orig.size() + 100;
  std::memcpy(bad.data(), &huge, 8);
  egtest::write_file(d + "/model.safetensors", bad);
  expect_error({"run", "-m", d, "-p", "x"}, "model.safetensors");
  // Offsets past the end / wrong dtype: edit the JSON header in place (same length).
  std::string header = orig.substr(8, hlen);
  json h = json::parse(header);
  const std::string victim = "model.layers.0.mlp.down_proj.weight";
  auto rewrite = [&](const json& hh) {
    std::string text = hh.dump();
    EXPECT_LE(text.size(), hlen);
    text.resize(hlen, ' ');
    std::string f = orig;
    f.replace(8, hlen, text);
    egtest::write_file(d + "/model.safetensors", f);
  };
  json h1 = h;
  h1[victim]["data_offsets"][1] = h1[victim]["data_offsets"][1].get<uint64_t>() + 100000000ull;
  rewrite(h1);
  expect_error({"run", "-m", d, "-p", "x"}, victim);
  json h2 = h;
  h2[victim]["dtype"] = "I64";
  rewrite(h2);
  expect_error({"run", "-m", d, "-p", "x"}, victim);
  // Shape that does not match config.json.
  json h3 = h;
  h3[victim]["shape"] = {512, 512};
  rewrite(h3);
  expect_error({"run", "-m", d, "-p", "x"}, victim);
  // Not JSON at all.
  std::string garbage = orig;
  std::memset(garbage.data() + 8, '#', 16);
  egtest::write_file(d + "/model.safetensors", garbage);
  expect_error({"run", "-m", d, "-p", "x"}, "model.safetensors");
}

TEST(CliErrors, ConfigProblems) {
  std::string d = copy_model();
  json c = json::parse(egtest::read_file(d + "/config.json"));
  c["model_type"] = "llama";
  egtest::write_file(d + "/config.json", c.dump());
  expect_error({"run", "-m", d, "-p", "x"}, "unsupported model_type 'llama'");
  c["model_type"] = "gemma3_text";
  c["hidden_size"] = 128;  // every tensor shape now disagrees
  egtest::write_file(d + "/config.json", c.dump());
  expect_error({"run", "-m", d, "-p", "x"}, "expected");
  egtest::write_file(d + "/config.json", "{ not json");
  expect_error({"run", "-m", d, "-p", "x"}, "config.json");
  d = copy_model();
  egtest::write_file(d + "/tokenizer.json", "{\"model\": ");
  expect_error({"run", "-m", d, "-p", "x"}, "tokenizer.json");
}

TEST(CliErrors, PromptProblems) {
  expect_error({"run", "-m", tiny(), "-p", ""}, "empty prompt");
  expect_error({"run", "-m", tiny()}, "empty prompt", "");
  std::string long_prompt;
  for (int i = 0; i < 50; ++i) long_prompt += "word ";
  expect_error({"run", "-m", tiny(), "-p", long_prompt, "--ctx", "16"}, "exceeds the context");
  expect_error({"run", "-m", tiny(), "-p", "x", "--system", "s"}, "--chat");
  expect_error({"run", "-m", tiny(), "-p", "x", "--top-p", "0"}, "top-p");
}

TEST(CliErrors, BadOptionValuesAndOutputs) {
  expect_error({"run", "-m", tiny(), "-p", "x", "-n", "-3"}, "--n-predict", "", 2);
  expect_error({"run", "-m", tiny(), "-p", "x", "--temp", "abc"}, "--temp", "", 2);
  expect_error({"run", "-m", tiny(), "-p", "x", "--bogus"}, "bogus", "", 2);
  expect_error({"run", "-m", tiny(), "-p", "x", "-t", "100000"}, "--threads", "", 2);
  expect_error({"run", "-m", tiny(), "-p", "x", "--temp", "inf"}, "finite");
  expect_error({"run", "-m", tiny(), "-p", "x", "--ctx", "99999"}, "exceeds the model's 32768");
  const std::string dir = egtest::make_temp_dir();
  expect_error({"run", "-m", tiny(), "-f", dir}, "is a directory");
  egtest::write_file(dir + "/file", "x");
  expect_error({"synth", "--like", "gemma-3-270m", "-o", dir + "/file/sub"}, "Not a directory");
  expect_error({"synth", "--like", "gemma-9", "-o", dir + "/out"}, "unknown --like");
  expect_error({"run", "-m", dir + "/file", "-p", "x"}, "a model is a Hugging Face directory or a .gguf file");
  // A tokenizer from another model is refused.
  const std::string m = copy_model();
  fs::remove(m + "/tokenizer.json");
  fs::copy_file(egtest::shared_dir() + "/tokenizers/gemma3/tokenizer.json", m + "/tokenizer.json");
  expect_error({"run", "-m", m, "-p", "x"}, "do not belong");
}

TEST(CliErrors, WriteFailureIsReported) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string cmd = egtest::cli_path() + " run -m " + tiny() + " -p hi -n 4 > /dev/full 2>/dev/null";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}

TEST(Cli, ContextFullIsSaid) {
  egtest::CmdResult r = egtest::run_cmd({egtest::cli_path(), "run", "-m", tiny(), "-p", "hi", "-c", "8", "-n", "100"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("context of 8 tokens is full"), std::string::npos) << r.err;
  const json j = run_json({"run", "-m", tiny(), "-p", "hi", "-c", "8", "-n", "100", "--ignore-eos"});
  EXPECT_TRUE(j["context_full"].get<bool>());
  EXPECT_EQ(j["prompt_ids"].size() + j["generated_ids"].size(), 9u);  // the last token needs no KV slot
}

}  // namespace
