// Checkpoint layouts found in the wild give the same logits as the plain one: the multimodal
// `gemma3` wrapper (text_config + language-model tensor prefixes, vision tower ignored) and
// sharded safetensors with an index.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/loaded_model.h"
#include "core/dtype.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "test_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string tiny() { return egtest::shared_dir() + "/models/tiny-gemma3"; }

std::vector<float> last_logits(const eg::Model& m, const std::vector<int32_t>& ids) {
  eg::KVCache kv(m.config(), static_cast<int>(ids.size()));
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::Last, logits);
  return logits;
}

// Writes tiny-gemma3's tensors renamed with `prefix` (replacing "model."), plus extra tensors,
// into `dir` as `shards` files with an index (or one model.safetensors when shards == 1).
void write_variant(const std::string& dir, const std::string& prefix, int shards, bool add_vision) {
  eg::TensorStore src = eg::TensorStore::open_dir(tiny());
  std::vector<eg::TensorToWrite> all;
  for (const auto& name : src.names()) {
    const eg::TensorInfo* t = src.find(name);
    all.push_back({prefix + name.substr(6), t->dtype, t->shape, t->data});
  }
  static const float vision[4] = {1, 2, 3, 4};
  if (add_vision) all.push_back({"vision_tower.vision_model.fake.weight", eg::DType::F32, {4}, vision});
  if (shards == 1) {
    eg::write_safetensors(dir + "/model.safetensors", all);
    return;
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  const size_t per = (all.size() + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    std::vector<eg::TensorToWrite> part(all.begin() + s * per, all.begin() + std::min(all.size(), (s + 1) * per));
    for (const auto& t : part) index["weight_map"][t.name] = file;
    eg::write_safetensors(dir + "/" + file, part);
  }
  egtest::write_file(dir + "/model.safetensors.index.json", index.dump(2));
}

void copy_tokenizer(const std::string& dir) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(tiny() + "/" + f, dir + "/" + f);
}

json wrapped_config() {
  json text = json::parse(egtest::read_file(tiny() + "/config.json"));
  text.erase("architectures");
  return {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
          {"text_config", text}, {"vision_config", {{"hidden_size", 1152}}}, {"eos_token_id", {1, 106}}};
}

TEST(CheckpointLayouts, MultimodalWrapperAndShardsMatchPlainCheckpoint) {
  const json ref = json::parse(egtest::read_file(tiny() + "/reference.json"));
  const std::vector<int32_t> ids = ref["prompts"][0]["input_ids"].get<std::vector<int32_t>>();
  auto plain = eg::Model::load_dir(tiny());
  const std::vector<float> want = last_logits(*plain, ids);

  struct Variant { std::string prefix; int shards; bool wrapper; };
  for (const Variant& v : {Variant{"language_model.model.", 1, true}, Variant{"model.language_model.", 3, true},
                           Variant{"model.", 2, false}}) {
    SCOPED_TRACE(v.prefix + " shards=" + std::to_string(v.shards));
    const std::string dir = egtest::make_temp_dir();
    write_variant(dir, v.prefix, v.shards, v.wrapper);
    copy_tokenizer(dir);
    egtest::write_file(dir + "/config.json",
                       v.wrapper ? wrapped_config().dump(2) : egtest::read_file(tiny() + "/config.json"));
    auto lm = eg::LoadedModel::load_dir(dir);
    EXPECT_EQ(last_logits(lm->model(), ids), want);  // bit-identical: same weights, same order
    EXPECT_EQ(lm->model().weights().prefix, v.prefix);
    bool said_vision = false;
    for (const auto& n : lm->notes()) said_vision |= n.find("vision") != std::string::npos;
    EXPECT_EQ(said_vision, v.wrapper);
  }
}

// The same weights stored as F32 (exact widening of BF16: bit-identical logits) and as F16
// (rounded: close logits).
TEST(CheckpointLayouts, F32AndF16WeightsLoad) {
  const json ref = json::parse(egtest::read_file(tiny() + "/reference.json"));
  const std::vector<int32_t> ids = ref["prompts"][1]["input_ids"].get<std::vector<int32_t>>();
  auto plain = eg::Model::load_dir(tiny());
  const std::vector<float> want = last_logits(*plain, ids);
  eg::TensorStore src = eg::TensorStore::open_dir(tiny());
  for (eg::DType dt : {eg::DType::F32, eg::DType::F16}) {
    SCOPED_TRACE(eg::dtype_name(dt));
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<eg::TensorToWrite> all;
    for (const auto& name : src.names()) {
      const eg::TensorInfo* t = src.find(name);
      ASSERT_EQ(t->dtype, eg::DType::BF16);
      const int64_t n = t->numel();
      bufs.emplace_back(static_cast<size_t>(n) * eg::dtype_size(dt));
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, t->data + 2 * i, 2);
        const float f = eg::bf16_to_f32(b);
        if (dt == eg::DType::F32) std::memcpy(bufs.back().data() + 4 * i, &f, 4);
        else {
          const uint16_t h = eg::f32_to_f16(f);
          std::memcpy(bufs.back().data() + 2 * i, &h, 2);
        }
      }
      all.push_back({name, dt, t->shape, bufs.back().data()});
    }
    const std::string dir = egtest::make_temp_dir();
    eg::write_safetensors(dir + "/model.safetensors", all);
    fs::copy_file(tiny() + "/config.json", dir + "/config.json");
    auto m = eg::Model::load_dir(dir);
    const std::vector<float> got = last_logits(*m, ids);
    if (dt == eg::DType::F32) {
      EXPECT_EQ(got, want);
    } else {
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 0.05) << i;
    }
  }
}

}  // namespace
