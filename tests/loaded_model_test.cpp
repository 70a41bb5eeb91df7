// Which tokens end a turn, per generation: eos ids of config.json and generation_config.json plus
// the chat format's end-of-turn token, looked up by name in the checkpoint's own vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/loaded_model.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

bool has(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(StopIds, PerGeneration) {
  struct Case { const char* model; const char* end_of_turn; };
  for (const Case& c : {Case{"tiny-gemma2", "<end_of_turn>"}, Case{"tiny-gemma3", "<end_of_turn>"},
                        Case{"tiny-gemma4", "<turn|>"}, Case{"tiny-gemma4-moe", "<turn|>"}}) {
    SCOPED_TRACE(c.model);
    auto lm = eg::LoadedModel::load_dir(egtest::shared_dir() + "/models/" + c.model);
    const int32_t eot = lm->tokenizer().token_id(c.end_of_turn);
    ASSERT_GE(eot, 0);
    EXPECT_TRUE(has(lm->stop_ids(), eot));
    EXPECT_TRUE(has(lm->stop_ids(), 1));  // <eos>
  }
}

// The end-of-turn id follows the checkpoint's vocabulary, not a hard-coded number: a Gemma 4
// copy without generation_config.json whose <turn|> sits at another id stops on that id.
TEST(StopIds, FollowTheVocabularyNotFixedIds) {
  const std::string src = egtest::shared_dir() + "/models/tiny-gemma4";
  const std::string dir = egtest::make_temp_dir();
  for (const char* f : {"config.json", "model.safetensors", "tokenizer_config.json"}) fs::copy_file(src + "/" + f, dir + "/" + f);
  nlohmann::json tok = nlohmann::json::parse(egtest::read_file(src + "/tokenizer.json"));
  // Swap the names of ids 106 (<turn|>) and 6 (<unused0>) in the vocab and the added tokens.
  auto& vocab = tok["model"]["vocab"];
  std::string a = "<turn|>", b;
  for (auto it = vocab.begin(); it != vocab.end(); ++it)
    if (it.value() == 6) b = it.key();
  ASSERT_FALSE(b.empty());
  vocab[a] = 6;
  vocab[b] = 106;
  for (auto& t : tok["added_tokens"]) {
    if (t["id"] == 106) t["id"] = 6;
    else if (t["id"] == 6) t["id"] = 106;
  }
  egtest::write_file(dir + "/tokenizer.json", tok.dump());
  nlohmann::json cfg = nlohmann::json::parse(egtest::read_file(src + "/config.json"));
  cfg["eos_token_id"] = 1;
  egtest::write_file(dir + "/config.json", cfg.dump());
  auto lm = eg::LoadedModel::load_dir(dir);
  EXPECT_EQ(lm->tokenizer().token_id("<turn|>"), 6);
  EXPECT_TRUE(has(lm->stop_ids(), 6));
  EXPECT_FALSE(has(lm->stop_ids(), 106));
}

}  // namespace
