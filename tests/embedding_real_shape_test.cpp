// EmbeddingGemma-300m's real shapes (hidden 768, 24 layers, 3 heads / 1 kv head of 256, MLP 1152,
// window 512, vocab 262144, Dense 768->3072->768) against sentence-transformers:
// tests/fixtures/embeddinggemma-real-shape-reference.json holds the config, each tensor's name,
// shape and scale, and per input (lengths 6, 700, 1100: across the 512 window) the pooled vector,
// both Dense outputs and the embedding. The weights are regenerated here from the file's formula
// (FNV-1a + splitmix64, see "generator"), written as a sentence-transformers folder (f32
// safetensors, 1.2 GB in a temp dir) and opened through open_embedder. Label: slow.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "embed/gemma_embedder.h"
#include "embed/open.h"
#include "format/safetensors.h"
#include "test_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// value_i of the generator for flat indices [first, first + n).
void gen_values(const std::string& name, double scale, int64_t first, int64_t n, float* out) {
  const uint64_t seed = fnv1a64(name);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed + static_cast<uint64_t>(first + i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 40) / static_cast<double>(1 << 24);
    out[i] = static_cast<float>((u * 2.0 - 1.0) * scale);
  }
}

const json& reference() {
  static const json j =
      json::parse(egtest::read_file(egtest::source_dir() + "/tests/fixtures/embeddinggemma-real-shape-reference.json"));
  return j;
}

// Writes the tensors whose reference name starts with `prefix` into `path`, names without it.
void write_part(const std::string& path, const std::string& prefix) {
  std::vector<eg::TensorSpec> specs;
  std::vector<const json*> src;
  for (const json& t : reference()["tensors"]) {
    const std::string n = t["name"];
    if (n.rfind(prefix, 0) != 0) continue;
    specs.push_back({n.substr(prefix.size()), eg::DType::F32, t["shape"].get<std::vector<int64_t>>()});
    src.push_back(&t);
  }
  ASSERT_FALSE(specs.empty()) << prefix;
  eg::SafetensorsWriter w(path, specs);
  std::vector<float> buf(1 << 20);
  for (const json* t : src) {
    int64_t numel = 1;
    for (int64_t d : (*t)["shape"]) numel *= d;
    for (int64_t i = 0; i < numel; i += static_cast<int64_t>(buf.size())) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), numel - i);
      gen_values((*t)["name"], (*t)["scale"], i, n, buf.data());
      w.append(buf.data(), static_cast<size_t>(n) * sizeof(float));
    }
  }
  w.finish();
}

double max_abs_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i].get<double>()));
  return m;
}

double max_abs(const json& b) {
  double m = 0;
  for (const json& v : b) m = std::max(m, std::abs(v.get<double>()));
  return m;
}

}  // namespace

TEST(EmbeddingRealShape, GeneratorMatchesSpotValues) {
  for (const auto& [name, vals] : reference()["spot_values_first3"].items()) {
    double scale = 0;
    for (const json& t : reference()["tensors"])
      if (t["name"] == name) scale = t["scale"];
    float v[3];
    gen_values(name, scale, 0, 3, v);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(v[i], vals[i].get<float>()) << name << "[" << i << "]";
  }
}

TEST(EmbeddingRealShape, StagesMatchSentenceTransformers) {
  const std::string dir = egtest::make_temp_dir() + "/real-shape";
  const std::string tiny = egtest::source_dir() + "/tests/fixtures/tiny-embeddinggemma";
  fs::create_directories(dir + "/1_Pooling");
  fs::create_directories(dir + "/2_Dense");
  fs::create_directories(dir + "/3_Dense");
  fs::create_directories(dir + "/4_Normalize");
  egtest::write_file(dir + "/config.json", reference()["config"].dump());
  for (const char* f : {"modules.json", "tokenizer.json", "tokenizer_config.json", "config_sentence_transformers.json",
                        "4_Normalize/config.json"})
    fs::copy_file(tiny + "/" + f, dir + "/" + f);
  egtest::write_file(dir + "/1_Pooling/config.json", R"({"embedding_dimension": 768, "pooling_mode": "mean", "include_prompt": true})");
  egtest::write_file(dir + "/2_Dense/config.json", R"({"in_features": 768, "out_features": 3072, "bias": false,
      "activation_function": "torch.nn.modules.linear.Identity"})");
  egtest::write_file(dir + "/3_Dense/config.json", R"({"in_features": 3072, "out_features": 768, "bias": false,
      "activation_function": "torch.nn.modules.linear.Identity"})");
  write_part(dir + "/model.safetensors", "0.model.");
  write_part(dir + "/2_Dense/model.safetensors", "2.");
  write_part(dir + "/3_Dense/model.safetensors", "3.");

  auto e = eg::embed::open_embedder(dir);
  auto& g = dynamic_cast<eg::embed::GemmaEmbedder&>(*e);
  EXPECT_EQ(e->full_dim(), 768);
  EXPECT_EQ(e->supported_dims(), (std::vector<int>{768, 512, 256, 128}));
  EXPECT_EQ(e->max_tokens(), 2048);
  for (const json& c : reference()["cases"]) {
    const auto ids = c["input_ids"].get<std::vector<int32_t>>();
    SCOPED_TRACE("length " + std::to_string(ids.size()));
    const auto t0 = std::chrono::steady_clock::now();
    const eg::embed::EmbedStages st = g.run_stages(ids);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("real shape, %zu tokens: %.2f s (%.0f tokens/s)\n", ids.size(), secs, ids.size() / secs);
    // Relative to each stage's scale (f32 sums over 768..3072 terms, 24 layers).
    const double dp = max_abs_diff(st.pooled, c["pooled"]) / max_abs(c["pooled"]);
    const double d1 = max_abs_diff(st.dense[0], c["dense1"]) / max_abs(c["dense1"]);
    const double d2 = max_abs_diff(st.dense[1], c["dense2"]) / max_abs(c["dense2"]);
    const double de = max_abs_diff(st.embedding, c["embedding"]);
    std::printf("real shape, %zu tokens: relative max diff pooled %.3g dense1 %.3g dense2 %.3g; embedding abs %.3g\n",
                ids.size(), dp, d1, d2, de);
    EXPECT_LT(dp, 2e-5);
    EXPECT_LT(d1, 2e-5);
    EXPECT_LT(d2, 2e-5);
    EXPECT_LT(de, 1e-6);
  }
}
