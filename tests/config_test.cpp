// config.json parsing: both key layouts, the multimodal wrapper, and every error case.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "test_util.h"

using nlohmann::json;

namespace {

// gemma-3-4b's text config in the Hub layout (values from the released config).
json hub_4b() {
  return json{{"model_type", "gemma3_text"}, {"vocab_size", 262208}, {"hidden_size", 2560},
              {"intermediate_size", 10240}, {"num_hidden_layers", 34}, {"num_attention_heads", 8},
              {"num_key_value_heads", 4}, {"head_dim", 256}, {"query_pre_attn_scalar", 256},
              {"sliding_window", 1024}, {"sliding_window_pattern", 6}, {"rope_theta", 1000000.0},
              {"rope_local_base_freq", 10000.0}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}},
              {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6}};
}

// The same in transformers 5's layout.
json v5_4b() {
  json c = hub_4b();
  for (const char* k : {"sliding_window_pattern", "rope_theta", "rope_local_base_freq", "rope_scaling"}) c.erase(k);
  json lt = json::array();
  for (int i = 0; i < 34; ++i) lt.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  c["layer_types"] = lt;
  c["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  return c;
}

eg::ModelConfig parse(const json& j, const std::string& gen = "") { return eg::parse_hf_config(j.dump(), gen, "config.json"); }

TEST(Config, HubAndV5LayoutsGiveTheSameGeometry) {
  const eg::ModelConfig a = parse(hub_4b()), b = parse(v5_4b());
  ASSERT_EQ(a.layers.size(), 34u);
  ASSERT_EQ(b.layers.size(), 34u);
  for (int i = 0; i < 34; ++i) {
    SCOPED_TRACE(i);
    const bool full = (i + 1) % 6 == 0;  // layer 33 stays sliding (Gemma 3 does not force the last)
    EXPECT_EQ(a.layers[i].type, full ? eg::LayerType::Full : eg::LayerType::Sliding);
    EXPECT_EQ(a.layers[i].type, b.layers[i].type);
    EXPECT_EQ(a.layers[i].rope_theta, full ? 1e6f : 1e4f);
    EXPECT_EQ(a.layers[i].rope_theta, b.layers[i].rope_theta);
    EXPECT_EQ(a.layers[i].rope_linear_factor, full ? 8.0f : 1.0f);
    EXPECT_EQ(a.layers[i].rope_linear_factor, b.layers[i].rope_linear_factor);
    EXPECT_EQ(a.layers[i].n_kv_heads, 4);
    EXPECT_EQ(a.layers[i].head_dim, 256);
  }
  EXPECT_FLOAT_EQ(a.query_scale, 1.0f / 16.0f);
  EXPECT_EQ(a.sliding_window, 1024);
  EXPECT_EQ(a.final_softcap, 0.0f);
}

TEST(Config, QueryPreAttnScalarDiffersFromHeadDim) {
  json c = hub_4b();
  c["query_pre_attn_scalar"] = 144;
  EXPECT_FLOAT_EQ(parse(c).query_scale, 1.0f / 12.0f);
}

TEST(Config, MultimodalWrapperTakesTextConfig) {
  json mm = {{"model_type", "gemma3"}, {"text_config", hub_4b()}, {"vision_config", {{"hidden_size", 1152}}},
             {"eos_token_id", json::array({1, 106})}};
  mm["text_config"].erase("model_type");
  const eg::ModelConfig c = parse(mm);
  EXPECT_TRUE(c.multimodal_wrapper);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 106}));
}

TEST(Config, GenerationConfigAddsEosIds) {
  json c = hub_4b();
  c["eos_token_id"] = 1;
  const eg::ModelConfig m = parse(c, R"({"eos_token_id": [1, 106]})");
  EXPECT_EQ(m.eos_token_ids, (std::vector<int>{1, 106}));
}

TEST(Config, ErrorsAreClear) {
  auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      eg::parse_hf_config(text, "", "config.json");
      FAIL() << "no error for " << text;
    } catch (const eg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{", "invalid JSON");
  expect_error("[1,2]", "JSON object");
  expect_error(R"({"hidden_size": 4})", "model_type");
  expect_error(R"({"model_type": "llama"})", "unsupported model_type 'llama'");
  expect_error(R"({"model_type": "gemma3"})", "text_config");
  json c = hub_4b();
  c["hidden_size"] = "big";
  expect_error(c.dump(), "hidden_size");
  c = hub_4b();
  c["num_key_value_heads"] = 3;
  expect_error(c.dump(), "multiple");
  c = v5_4b();
  c["layer_types"].erase(0);
  expect_error(c.dump(), "layer_types");
  c = v5_4b();
  c["layer_types"][0] = "chunked_attention";
  expect_error(c.dump(), "layer type");
  c = hub_4b();
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  expect_error(c.dump(), "yarn");
  c = hub_4b();
  c["use_bidirectional_attention"] = "yes";
  expect_error(c.dump(), "use_bidirectional_attention");
  c = hub_4b();  // EmbeddingGemma's Gemma 3 encoder
  c["use_bidirectional_attention"] = true;
  EXPECT_TRUE(eg::parse_hf_config(c.dump(), "", "config.json").bidirectional);
  EXPECT_FALSE(eg::parse_hf_config(hub_4b().dump(), "", "config.json").bidirectional);
  EXPECT_THROW(eg::load_hf_config("/nonexistent/dir"), eg::Error);
  EXPECT_THROW(eg::load_hf_config(egtest::make_temp_dir()), eg::Error);
}

TEST(Config, TinyGemma3FromDisk) {
  const eg::ModelConfig c = eg::load_hf_config(egtest::shared_dir() + "/models/tiny-gemma3");
  EXPECT_EQ(c.family, eg::ModelFamily::Gemma3);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.layers[5].type, eg::LayerType::Full);
  EXPECT_EQ(c.layers[0].type, eg::LayerType::Sliding);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 106}));
  EXPECT_EQ(c.parameter_count(), 7805952);  // ../shared/models/README.md
}

}  // namespace
