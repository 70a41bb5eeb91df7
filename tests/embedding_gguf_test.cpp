// EmbeddingGemma as llama.cpp's `gemma-embedding` GGUF (our quantize writer, llama.cpp's names and
// keys): the tiny fixture written as F32 / F16 / Q8_0 GGUF, loaded back through open_embedder,
// against the sentence-transformers reference (tests/fixtures/tiny-embeddinggemma/reference.json).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "embed/gemma_embedder.h"
#include "embed/open.h"
#include "format/gguf.h"
#include "model/gguf_quantize.h"
#include "test_util.h"

using nlohmann::json;

namespace {

std::string tiny_dir() { return egtest::source_dir() + "/tests/fixtures/tiny-embeddinggemma"; }

const json& reference() {
  static const json j = json::parse(egtest::read_file(tiny_dir() + "/reference.json"));
  return j;
}

std::string gguf_of(const std::string& type) {
  static std::string dir = egtest::make_temp_dir();
  const std::string out = dir + "/tiny-embeddinggemma-" + type + ".gguf";
  eg::GGUFQuantizeOptions o;
  o.type = type;
  eg::quantize_to_gguf(tiny_dir(), out, o);
  return out;
}

struct Diff {
  double max_abs = 0, min_cos = 1;
};

Diff compare(eg::embed::Embedder& e) {
  Diff d;
  for (const json& c : reference()["cases"]) {
    eg::embed::EmbedOptions o;
    if (!c["prompt_name"].is_null()) o.task = c["prompt_name"];
    const auto v = e.embed({c["text"].get<std::string>()}, o)[0];
    EXPECT_EQ(v.tokens, static_cast<int>(c["input_ids"].size()));
    double dot = 0;
    for (size_t i = 0; i < v.vector.size(); ++i) {
      d.max_abs = std::max(d.max_abs, std::abs(v.vector[i] - c["encode"][i].get<double>()));
      dot += v.vector[i] * c["encode"][i].get<double>();
    }
    d.min_cos = std::min(d.min_cos, dot);  // both unit length
  }
  return d;
}

}  // namespace

TEST(EmbeddingGguf, MetadataAsLlamaCppNamesIt) {
  auto g = eg::GGUFFile::open(gguf_of("f32"));
  EXPECT_EQ(g->get_string("general.architecture"), "gemma-embedding");
  EXPECT_EQ(g->get_int("gemma-embedding.pooling_type"), 1);
  EXPECT_EQ(g->get_int("gemma-embedding.attention.sliding_window"), 8);
  EXPECT_EQ(g->get_int("gemma-embedding.attention.sliding_window_pattern"), 4);  // 3 sliding, 1 full
  EXPECT_EQ(g->get_int("gemma-embedding.dense_2_feat_in"), 64);
  EXPECT_EQ(g->get_int("gemma-embedding.dense_2_feat_out"), 256);
  EXPECT_EQ(g->get_int("gemma-embedding.dense_3_feat_in"), 256);
  EXPECT_EQ(g->get_int("gemma-embedding.dense_3_feat_out"), 64);
  ASSERT_NE(g->find_tensor("dense_2.weight"), nullptr);
  EXPECT_EQ(g->find_tensor("dense_2.weight")->ne, (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(g->find_tensor("dense_3.weight")->ne, (std::vector<int64_t>{256, 64}));
  EXPECT_TRUE(g->get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_TRUE(g->get_bool("tokenizer.ggml.add_eos_token", false));
  EXPECT_TRUE(eg::embed::is_embedding_model(gguf_of("f32")));
}

TEST(EmbeddingGguf, F32MatchesTheReference) {
  auto e = eg::embed::open_embedder(gguf_of("f32"));
  EXPECT_EQ(e->full_dim(), 64);
  EXPECT_EQ(e->task_names().size(), 14u);  // the prompts travel in edgegemma.embedding.*
  EXPECT_EQ(e->max_tokens(), 2048);
  const Diff d = compare(*e);
  std::printf("gguf f32: max |diff| %.3g, min cosine %.9f\n", d.max_abs, d.min_cos);
  EXPECT_LT(d.max_abs, 2e-6);
  // Same ids and stages as the folder.
  auto& g = dynamic_cast<eg::embed::GemmaEmbedder&>(*e);
  const json& c = reference()["cases"][5];
  eg::embed::EmbedOptions o;
  if (!c["prompt_name"].is_null()) o.task = c["prompt_name"];
  EXPECT_EQ(g.tokenize(c["text"], o), c["input_ids"].get<std::vector<int32_t>>());
}

TEST(EmbeddingGguf, QuantizedWithinStatedTolerance) {
  // docs/embeddings.md: F16 weights |diff| < 1e-3, Q8_0 weights cosine >= 0.999 and |diff| < 0.02.
  {
    auto e = eg::embed::open_embedder(gguf_of("f16"));
    const Diff d = compare(*e);
    std::printf("gguf f16 weights: max |diff| %.3g, min cosine %.9f\n", d.max_abs, d.min_cos);
    EXPECT_LT(d.max_abs, 1e-3);
  }
  {
    auto e = eg::embed::open_embedder(gguf_of("q8_0"));
    const Diff d = compare(*e);
    std::printf("gguf q8_0 weights: max |diff| %.3g, min cosine %.9f\n", d.max_abs, d.min_cos);
    EXPECT_GT(d.min_cos, 0.999);
    EXPECT_LT(d.max_abs, 0.02);
    EXPECT_GT(d.max_abs, 0.0);  // it is really quantized
  }
}

TEST(EmbeddingGguf, ChatGgufIsNotAnEmbeddingModel) {
  EXPECT_THROW(eg::embed::open_embedder(egtest::source_dir() + "/tests/fixtures/nonexistent.gguf"), eg::Error);
  eg::GGUFQuantizeOptions o;
  o.type = "f32";
  const std::string out = egtest::make_temp_dir() + "/chat.gguf";
  eg::quantize_to_gguf(egtest::shared_dir() + "/models/tiny-gemma3", out, o);
  EXPECT_FALSE(eg::embed::is_embedding_model(out));
  EXPECT_THROW(eg::embed::open_embedder(out), eg::Error);
}

TEST(EmbeddingGguf, EosFlagFollowsTokenizerConfig) {
  // A folder whose tokenizer.json template adds only <bos> but whose tokenizer_config.json says
  // add_eos_token: the GGUF says add_eos_token too, so llama.cpp and we end the ids with <eos>.
  namespace fs = std::filesystem;
  const std::string dir = egtest::make_temp_dir() + "/emb";
  fs::copy(tiny_dir(), dir, fs::copy_options::recursive);
  json tj = json::parse(egtest::read_file(dir + "/tokenizer.json"));
  tj["post_processor"]["single"].erase(2);
  egtest::write_file(dir + "/tokenizer.json", tj.dump());
  const std::string out = dir + "/x.gguf";
  eg::GGUFQuantizeOptions o;
  o.type = "f32";
  eg::quantize_to_gguf(dir, out, o);
  EXPECT_FALSE(eg::GGUFFile::open(out)->get_bool("tokenizer.ggml.add_eos_token", true));
  json tc = json::parse(egtest::read_file(dir + "/tokenizer_config.json"));
  tc["add_eos_token"] = true;
  egtest::write_file(dir + "/tokenizer_config.json", tc.dump());
  eg::quantize_to_gguf(dir, out, o);
  EXPECT_TRUE(eg::GGUFFile::open(out)->get_bool("tokenizer.ggml.add_eos_token", false));
  auto e = eg::embed::open_embedder(out);
  const json& c = reference()["cases"][0];
  EXPECT_EQ(dynamic_cast<eg::embed::GemmaEmbedder&>(*e).tokenize(c["text"], {}), c["input_ids"].get<std::vector<int32_t>>());
}
