// Gemma 2 and Gemma 4 config.json rules (gemma-architectures.md §1.1, §3.1, §3.3.3-§3.3.5):
// per-layer head dims and KV heads from flat keys or per_layer_config, KV-sharing sources,
// double-wide MLP, forced last full layer, proportional RoPE, MoE fields, and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "test_util.h"

using nlohmann::json;

namespace {

eg::ModelConfig parse(const json& j) { return eg::parse_hf_config(j.dump(), "", "config.json"); }

json layer_types(int n, int period) {
  json lt = json::array();
  for (int i = 0; i < n; ++i) lt.push_back((i + 1) % period == 0 ? "full_attention" : "sliding_attention");
  return lt;
}

// gemma-4-E2B's text config in the Hub's flat layout (§3.2).
json e2b() {
  return json{{"model_type", "gemma4_text"}, {"vocab_size", 262144}, {"hidden_size", 1536},
              {"intermediate_size", 6144}, {"num_hidden_layers", 35}, {"num_attention_heads", 8},
              {"num_key_value_heads", 1}, {"head_dim", 256}, {"global_head_dim", 512},
              {"sliding_window", 512}, {"layer_types", layer_types(35, 5)}, {"num_kv_shared_layers", 20},
              {"use_double_wide_mlp", true}, {"hidden_size_per_layer_input", 256},
              {"vocab_size_per_layer_input", 262144}, {"final_logit_softcapping", 30.0},
              {"max_position_embeddings", 131072},
              {"rope_parameters", {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                                   {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25},
                                                       {"rope_theta", 1000000.0}}}}}};
}

TEST(Gemma4Config, E2BGeometryAndKvSharing) {
  const eg::ModelConfig c = parse(e2b());
  EXPECT_EQ(c.family, eg::ModelFamily::Gemma4);
  EXPECT_EQ(c.norm_offset, 0.0f);
  EXPECT_EQ(c.query_scale, 1.0f);
  EXPECT_TRUE(c.v_norm);
  EXPECT_EQ(c.ple_dim, 256);
  EXPECT_EQ(c.n_kv_layers(), 15);
  for (int i = 0; i < 35; ++i) {
    SCOPED_TRACE(i);
    const auto& l = c.layers[i];
    const bool full = (i + 1) % 5 == 0;
    EXPECT_EQ(l.type, full ? eg::LayerType::Full : eg::LayerType::Sliding);
    EXPECT_EQ(l.head_dim, full ? 512 : 256);
    EXPECT_EQ(l.n_kv_heads, 1);
    EXPECT_EQ(l.rope_pairs, full ? 64 : 128);  // proportional: int(0.25 · 512 / 2)
    EXPECT_EQ(l.rope_theta, full ? 1e6f : 1e4f);
    EXPECT_EQ(l.kv_source, i < 15 ? -1 : (full ? 14 : 13));
    EXPECT_EQ(l.intermediate_size, i < 15 ? 6144 : 12288);
    EXPECT_FALSE(l.k_eq_v);
  }
}

TEST(Gemma4Config, PerLayerConfigMatchesFlatKeys) {
  json v5 = e2b();
  v5.erase("global_head_dim");
  json plc = json::object();
  for (int i = 4; i < 35; i += 5) plc[(i < 10 ? "0" : "") + std::to_string(i)] = {{"head_dim", 512}};
  v5["per_layer_config"] = plc;
  const eg::ModelConfig a = parse(e2b()), b = parse(v5);
  for (int i = 0; i < 35; ++i) {
    EXPECT_EQ(a.layers[i].head_dim, b.layers[i].head_dim) << i;
    EXPECT_EQ(a.layers[i].n_kv_heads, b.layers[i].n_kv_heads) << i;
    EXPECT_EQ(a.layers[i].kv_source, b.layers[i].kv_source) << i;
  }
}

TEST(Gemma4Config, KEqVAndGlobalKvHeadsOnlyTogether) {
  json c = e2b();
  c["num_global_key_value_heads"] = 4;  // ignored without attention_k_eq_v
  c["num_kv_shared_layers"] = 0;
  EXPECT_EQ(parse(c).layers[4].n_kv_heads, 1);
  c["attention_k_eq_v"] = true;
  const eg::ModelConfig k = parse(c);
  EXPECT_EQ(k.layers[4].n_kv_heads, 4);
  EXPECT_TRUE(k.layers[4].k_eq_v);
  EXPECT_FALSE(k.layers[3].k_eq_v);
  EXPECT_EQ(k.layers[3].n_kv_heads, 1);
}

TEST(Gemma4Config, LastLayerIsForcedFull) {
  json c = e2b();
  c["num_hidden_layers"] = 4;
  c["num_kv_shared_layers"] = 0;
  c["layer_types"] = json::array({"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention"});
  EXPECT_EQ(parse(c).layers[3].type, eg::LayerType::Full);
}

TEST(Gemma4Config, MoeAndWrapper) {
  json t = e2b();
  t["enable_moe_block"] = true;
  t["num_experts"] = 128;
  t["top_k_experts"] = 8;
  t["moe_intermediate_size"] = 704;
  json w = {{"model_type", "gemma4"}, {"text_config", t}, {"eos_token_id", {1, 106}}};
  const eg::ModelConfig c = parse(w);
  EXPECT_TRUE(c.multimodal_wrapper);
  EXPECT_EQ(c.n_experts, 128);
  EXPECT_EQ(c.top_k_experts, 8);
  EXPECT_EQ(c.moe_intermediate_size, 704);
}

TEST(Gemma4Config, Errors) {
  auto expect_error = [](const json& j, const std::string& needle) {
    try {
      parse(j);
      FAIL() << "no error for " << j.dump();
    } catch (const eg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  json c = e2b();
  c["num_kv_shared_layers"] = 35;
  expect_error(c, "num_kv_shared_layers");
  c = e2b();
  c["num_kv_shared_layers"] = 34;  // layer 34 (full) would have no earlier full layer to read
  expect_error(c, "no earlier layer");
  c = e2b();
  c["per_layer_config"] = {{"x7", {{"head_dim", 512}}}};
  expect_error(c, "per_layer_config key");
  c = e2b();
  c["enable_moe_block"] = true;
  c["num_experts"] = 4;
  c["top_k_experts"] = 8;
  c["moe_intermediate_size"] = 64;
  expect_error(c, "MoE");
  c = e2b();
  c["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  expect_error(c, "yarn");
  c = e2b();
  c["use_bidirectional_attention"] = "all";
  expect_error(c, "encoder");
}

TEST(Gemma2Config, DefaultsAndHubKeys) {
  const json g2 = {{"model_type", "gemma2"}, {"vocab_size", 256000}, {"hidden_size", 2304},
                   {"intermediate_size", 9216}, {"num_hidden_layers", 26}, {"num_attention_heads", 8},
                   {"num_key_value_heads", 4}, {"head_dim", 256}, {"query_pre_attn_scalar", 256},
                   {"sliding_window", 4096}, {"rope_theta", 10000.0}, {"attn_logit_softcapping", 50.0},
                   {"final_logit_softcapping", 30.0}, {"max_position_embeddings", 8192}};
  const eg::ModelConfig c = parse(g2);
  EXPECT_EQ(c.family, eg::ModelFamily::Gemma2);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.attn_softcap, 50.0f);
  EXPECT_EQ(c.final_softcap, 30.0f);
  EXPECT_EQ(c.norm_offset, 1.0f);
  for (int i = 0; i < 26; ++i) {
    EXPECT_EQ(c.layers[i].type, i % 2 == 0 ? eg::LayerType::Sliding : eg::LayerType::Full) << i;
    EXPECT_EQ(c.layers[i].rope_theta, 10000.0f);
    EXPECT_EQ(c.layers[i].rope_pairs, 128);
  }
}

}  // namespace

// The √H embedding scale per compute dtype equals what transformers materialises
// (tests/fixtures/embed_scale_reference.json, recorded with transformers 5.17).

namespace {
TEST(EmbeddingScale, MatchesTransformersPerDtype) {
  const json ref = json::parse(egtest::read_file(egtest::source_dir() + "/tests/fixtures/embed_scale_reference.json"));
  ASSERT_GE(ref["table"].size(), 7u);
  for (const auto& row : ref["table"]) {
    const int H = row["hidden_size"];
    EXPECT_EQ(eg::embedding_scale(H, eg::DType::F32), row["fp32"].get<float>()) << H;
    EXPECT_EQ(eg::embedding_scale(H, eg::DType::BF16), row["bf16"].get<float>()) << H;
    EXPECT_EQ(eg::embedding_scale(H, eg::DType::F16), row["fp16"].get<float>()) << H;
  }
}
}  // namespace
