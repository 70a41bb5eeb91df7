// EmbeddingGemma path against sentence-transformers (tests/fixtures/tiny-embeddinggemma,
// reference.json from tools/gen_embedding_references.py: transformers 5.17 / sentence-transformers
// 6.0.1, CPU float32): every stage (ids, token embeddings, pooled, both Dense outputs, the
// normalised embedding, encode()'s output, Matryoshka truncations), the window rule, options and
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "embed/gemma_embedder.h"
#include "embed/open.h"
#include "embed/st_config.h"
#include "test_util.h"

using nlohmann::json;

namespace {

std::string tiny_dir() { return egtest::source_dir() + "/tests/fixtures/tiny-embeddinggemma"; }

const json& reference() {
  static const json j = json::parse(egtest::read_file(tiny_dir() + "/reference.json"));
  return j;
}

double max_abs_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i].get<double>()));
  return m;
}

eg::embed::GemmaEmbedder& tiny() {
  static std::unique_ptr<eg::embed::Embedder> e = eg::embed::open_embedder(tiny_dir());
  return dynamic_cast<eg::embed::GemmaEmbedder&>(*e);
}

}  // namespace

TEST(EmbeddingReference, EveryStageMatchesSentenceTransformers) {
  auto& e = tiny();
  ASSERT_EQ(reference()["cases"].size(), 15u);
  double worst_tok = 0, worst_emb = 0;
  for (const json& c : reference()["cases"]) {
    SCOPED_TRACE(c["prompted_text"].get<std::string>());
    eg::embed::EmbedOptions o;
    if (!c["prompt_name"].is_null()) o.task = c["prompt_name"];
    const std::vector<int32_t> ids = e.tokenize(c["text"], o);
    ASSERT_EQ(ids, c["input_ids"].get<std::vector<int32_t>>());
    const eg::embed::EmbedStages st = e.run_stages(ids);
    const int64_t H = 64, T = static_cast<int64_t>(ids.size());
    ASSERT_EQ(st.token_embeddings.size(), static_cast<size_t>(T * H));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> row(st.token_embeddings.begin() + t * H, st.token_embeddings.begin() + (t + 1) * H);
      worst_tok = std::max(worst_tok, max_abs_diff(row, c["token_embeddings"][t]));
    }
    EXPECT_LT(max_abs_diff(st.pooled, c["pooled"]), 2e-5);
    ASSERT_EQ(st.dense.size(), 2u);
    EXPECT_LT(max_abs_diff(st.dense[0], c["dense1"]), 5e-5);
    EXPECT_LT(max_abs_diff(st.dense[1], c["dense2"]), 5e-5);
    worst_emb = std::max(worst_emb, max_abs_diff(st.embedding, c["embedding"]));
    // The public path: embed() equals encode(), and the truncations.
    const auto full = e.embed({c["text"].get<std::string>()}, o);
    EXPECT_LT(max_abs_diff(full[0].vector, c["encode"]), 2e-6);
    EXPECT_EQ(full[0].tokens, T);
    for (const char* d : {"32", "16"}) {
      o.dim = std::stoi(d);
      const auto tr = e.embed({c["text"].get<std::string>()}, o);
      EXPECT_LT(max_abs_diff(tr[0].vector, c["truncated"][d]), 2e-6) << d;
    }
  }
  // Last hidden states of magnitude ~1: f32 agreement to a few ulps of accumulated error.
  EXPECT_LT(worst_tok, 5e-5);
  EXPECT_LT(worst_emb, 2e-6);
  std::printf("tiny: max |token embedding diff| %.3g, max |embedding diff| %.3g\n", worst_tok, worst_emb);
}

TEST(EmbeddingReference, WindowRuleIsSymmetricHalfWindow) {
  // The longest case (96 tokens) crosses the sliding window (8) many times: a causal window,
  // a full |q-k| < 8 window or no window at all give visibly different vectors. Check that the
  // reference is not met by the wrong rules by perturbing the config's window.
  auto& e = tiny();
  const json* longest = nullptr;
  for (const json& c : reference()["cases"])
    if (!longest || c["input_ids"].size() > (*longest)["input_ids"].size()) longest = &c;
  ASSERT_GT((*longest)["input_ids"].size(), 64u);
  const auto ids = (*longest)["input_ids"].get<std::vector<int32_t>>();
  EXPECT_LT(max_abs_diff(e.run_stages(ids).embedding, (*longest)["embedding"]), 2e-6);
  auto& cfg = const_cast<eg::ModelConfig&>(e.model().config());
  const int w = cfg.sliding_window;
  for (int other : {w * 2, w - 2, 1 << 20}) {  // |q-k| <= 8 / <= 3 / everything visible
    cfg.sliding_window = other;
    EXPECT_GT(max_abs_diff(e.run_stages(ids).embedding, (*longest)["embedding"]), 1e-3) << "window " << other;
  }
  cfg.sliding_window = w;
}

TEST(EmbeddingReference, InterfaceFacts) {
  auto& e = tiny();
  EXPECT_EQ(e.full_dim(), 64);
  EXPECT_EQ(e.supported_dims(), (std::vector<int>{64, 32, 16}));
  EXPECT_EQ(e.max_tokens(), 2048);
  const auto names = e.task_names();
  EXPECT_EQ(names.size(), 14u);
  EXPECT_NE(std::find(names.begin(), names.end(), "query"), names.end());
  EXPECT_EQ(e.prefix_for("query"), "task: search result | query: ");
  EXPECT_EQ(e.prefix_for("document"), "title: none | text: ");
  EXPECT_EQ(e.prefix_for(""), "");  // no default_prompt_name: no prefix
  EXPECT_EQ(e.model_digest().size(), 64u);
  EXPECT_EQ(e.model_digest(), e.model_digest());
  EXPECT_EQ(eg::embed::matryoshka_dims(768), (std::vector<int>{768, 512, 256, 128}));
  EXPECT_TRUE(eg::embed::is_embedding_model(tiny_dir()));
  EXPECT_FALSE(eg::embed::is_embedding_model(egtest::shared_dir() + "/models/tiny-gemma3"));
  EXPECT_FALSE(eg::embed::is_embedding_model("/nonexistent"));
}

TEST(EmbeddingReference, BatchEqualsOneAtATime) {
  auto& e = tiny();
  std::vector<std::string> texts;
  for (const json& c : reference()["cases"])
    if (c["prompt_name"].is_null()) texts.push_back(c["text"]);
  const auto batch = e.embed(texts, {});
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i].vector, e.embed({texts[i]}, {})[0].vector);
}

TEST(EmbeddingReference, BadOptionsAndInputsAreClearErrors) {
  auto& e = tiny();
  eg::embed::EmbedOptions o;
  o.task = "nonsense";
  try {
    e.embed({"x"}, o);
    FAIL();
  } catch (const eg::Error& err) {
    EXPECT_NE(std::string(err.what()).find("query"), std::string::npos) << err.what();
  }
  o = {};
  o.dim = 20;
  EXPECT_THROW(e.embed({"x"}, o), eg::Error);
  EXPECT_THROW(e.embed({std::string("\xff\xfe")}, {}), eg::Error);
  EXPECT_THROW(e.embed({std::string(20000, 'a') + " b c"}, {}), eg::Error);  // > 2048 tokens
  // A bad input in a batch names it, and nothing is computed.
  try {
    e.embed({"fine", std::string("\xc3")}, {});
    FAIL();
  } catch (const eg::Error& err) {
    EXPECT_NE(std::string(err.what()).find("input 1"), std::string::npos) << err.what();
  }
  EXPECT_THROW(eg::embed::open_embedder("/nonexistent"), eg::Error);
  EXPECT_THROW(eg::embed::open_embedder(egtest::shared_dir() + "/models/tiny-gemma3"), eg::Error);
}

TEST(EmbeddingStConfig, ParsesAndRejects) {
  eg::embed::StConfig c;
  eg::embed::parse_st_prompts(R"({"prompts": {"b": "B: ", "a": "A: "}, "default_prompt_name": "a"})", "x", c);
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[0].name, "a");
  EXPECT_EQ(c.default_prompt_name, "a");
  EXPECT_THROW(eg::embed::parse_st_prompts(R"({"prompts": {"a": 1}})", "x", c), eg::Error);
  EXPECT_THROW(eg::embed::parse_st_prompts(R"({"prompts": {"a": "A"}, "default_prompt_name": "z"})", "x", c), eg::Error);
  EXPECT_THROW(eg::embed::parse_st_prompts("[", "x", c), eg::Error);
  const auto m = eg::embed::parse_st_modules(
      R"([{"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
          {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}])", "m");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].first, "Transformer");
  EXPECT_EQ(m[1].second, "1_Pooling");
  EXPECT_THROW(eg::embed::parse_st_modules(R"([{"path": "../x", "type": "Dense"}])", "m"), eg::Error);
  EXPECT_THROW(eg::embed::parse_st_modules(R"({"a": 1})", "m"), eg::Error);
}

TEST(EmbeddingReference, EosFromTokenizerConfigWhenThePostProcessorLacksIt) {
  // transformers rebuilds the post-processor from add_bos_token / add_eos_token; a tokenizer.json
  // whose own template adds only <bos> must still give <bos> ... <eos>.
  namespace fs = std::filesystem;
  const std::string dir = egtest::make_temp_dir() + "/emb";
  fs::copy(tiny_dir(), dir, fs::copy_options::recursive);
  json tj = json::parse(egtest::read_file(dir + "/tokenizer.json"));
  tj["post_processor"]["single"].erase(2);  // drop the <eos> of the template
  egtest::write_file(dir + "/tokenizer.json", tj.dump());
  json tc = json::parse(egtest::read_file(dir + "/tokenizer_config.json"));
  tc["add_eos_token"] = true;  // as EmbeddingGemma's own tokenizer_config.json
  egtest::write_file(dir + "/tokenizer_config.json", tc.dump());
  auto e = eg::embed::open_embedder(dir);
  auto& g = dynamic_cast<eg::embed::GemmaEmbedder&>(*e);
  const json& c = reference()["cases"][0];
  EXPECT_EQ(g.tokenize(c["text"], {}), c["input_ids"].get<std::vector<int32_t>>());
  // And without add_eos_token in tokenizer_config.json the text really ends without <eos>.
  tc["add_eos_token"] = false;
  egtest::write_file(dir + "/tokenizer_config.json", tc.dump());
  auto e2 = eg::embed::open_embedder(dir);
  const auto ids = dynamic_cast<eg::embed::GemmaEmbedder&>(*e2).tokenize(c["text"], {});
  EXPECT_EQ(ids.size() + 1, c["input_ids"].size());
}
