// A random-weight Gemma 3 (tests/fixtures/gemma3-random, made by gen_gemma3_random.py with
// transformers 5.17 float32 eager on the GPU machine) exercising what the trained tiny model does
// not: query_pre_attn_scalar (80) != head_dim (64), linear RoPE scaling x8 on the full layer,
// sqrt(320) not exact, GQA with 2 KV heads, sliding window 16 on an 80-token sequence, the Hub's
// flat config keys, and transformers' own saved (v5) config layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/model.h"
#include "test_util.h"

using nlohmann::json;

namespace {

std::string fixture() { return egtest::source_dir() + "/tests/fixtures/gemma3-random"; }

void check(const std::string& dir, const json& ref) {
  auto model = eg::Model::load_dir(dir);
  EXPECT_EQ(model->config().layers[5].rope_linear_factor, 8.0f);
  EXPECT_EQ(model->config().layers[6].type, eg::LayerType::Sliding);
  const std::vector<int32_t> ids = ref["input_ids"].get<std::vector<int32_t>>();
  const int n = static_cast<int>(ids.size());
  const int V = model->config().vocab_size;
  eg::KVCache kv(model->config(), n + 20);
  eg::ForwardScratch s;
  std::vector<float> logits;
  model->forward(ids.data(), n, kv, s, eg::LogitsMode::All, logits);
  for (const auto& [pos, want] : ref["logits"].items()) {
    const int p = std::stoi(pos);
    for (int i = 0; i < V; ++i)
      ASSERT_NEAR(logits[static_cast<size_t>(p) * V + i], want[i].get<float>(), 1e-3) << "position " << p << " id " << i;
  }
  std::vector<int32_t> got;
  std::vector<float> last(logits.end() - V, logits.end());
  for (int i = 0; i < 20; ++i) {
    int32_t next = eg::argmax(last.data(), V);
    got.push_back(next);
    model->forward(&next, 1, kv, s, eg::LogitsMode::Last, last);
  }
  EXPECT_EQ(got, ref["greedy_new_ids"].get<std::vector<int32_t>>());
}

TEST(Gemma3RandomModel, HubConfigMatchesTransformers) {
  const json ref = json::parse(egtest::read_file(fixture() + "/reference.json"));
  check(fixture(), ref);
}

TEST(Gemma3RandomModel, TransformersSavedConfigMatchesToo) {
  const json ref = json::parse(egtest::read_file(fixture() + "/reference.json"));
  const std::string dir = egtest::make_temp_dir();
  egtest::write_file(dir + "/config.json", ref["config_as_saved_by_transformers"].dump(2));
  std::filesystem::create_symlink(fixture() + "/model.safetensors", dir + "/model.safetensors");
  check(dir, ref);
}

}  // namespace
