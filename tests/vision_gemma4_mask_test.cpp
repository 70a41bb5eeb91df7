// The Gemma 4 26B/31B image mask (text_config.use_bidirectional_attention = "vision";
// gemma-multimodal.md §2.5.3) against transformers 5.17 float32 eager on a random checkpoint
// (tests/fixtures/gemma4-vision-mask, tools/gen_panscan_reference.py part B): vocab 512 holding
// the image token ids, sliding window 8, layers S S F S F, two image blocks of 12 and 10 rows
// (longer than the window) fed as soft-token rows (inputs_embeds in transformers, EmbedSpan here).
// transformers' own logits equal those under an explicit rule-(C) mask exactly and differ from
// rules (A) and (B) by 3.5 / 3.7, and from the causal mask by 6.8 (reference.json), so a wrong
// rule (bidirectional on full layers too, the window not applied, ...) fails here.
#include <gtest/gtest.h>

#include "kv/kv_cache.h"
#include "mmproj_gemma4_util.h"
#include "model/gguf_quantize.h"
#include "model/model.h"
#include "vision_test_util.h"

using namespace eg;

namespace {

std::string fixture() { return egtest::source_dir() + "/tests/fixtures/gemma4-vision-mask"; }

struct Ref {
  nlohmann::json j;
  std::vector<float> soft, logits, causal;
};

const Ref& ref() {
  static const Ref r = [] {
    Ref r;
    r.j = egtest::read_json(fixture() + "/reference.json");
    auto a = egtest::read_ref_arrays(fixture() + "/reference_arrays.safetensors");
    r.soft = a.at("soft_tokens").f32();
    r.logits = a.at("logits").f32();
    r.causal = a.at("logits_causal").f32();
    return r;
  }();
  return r;
}

// The image blocks of the reference input as EmbedSpans over the soft-token rows.
std::vector<EmbedSpan> spans(const std::vector<int32_t>& types, int H, bool bidirectional) {
  std::vector<EmbedSpan> v;
  const float* rows = ref().soft.data();
  for (int t = 0; t < static_cast<int>(types.size());) {
    if (types[t] != 1) {
      ++t;
      continue;
    }
    int e = t;
    while (e < static_cast<int>(types.size()) && types[e] == 1) ++e;
    v.push_back(EmbedSpan{t, e - t, rows, bidirectional});
    rows += static_cast<size_t>(e - t) * H;
    t = e;
  }
  return v;
}

// max |ours − want| over the reference positions.
double run(const Model& m, int page_tokens, bool bidirectional, const std::vector<float>& want) {
  const std::vector<int32_t> ids = ref().j["input_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> types = ref().j["mm_token_type_ids"].get<std::vector<int32_t>>();
  const int T = static_cast<int>(ids.size()), V = m.config().vocab_size, H = m.config().hidden_size;
  KVCacheOptions o;
  o.type = KVType::F32;
  o.page_tokens = page_tokens;
  o.max_tokens = 64;
  KVCache kv(m.config(), o);
  ForwardScratch s;
  std::vector<float> logits;
  const std::vector<EmbedSpan> sp = spans(types, H, bidirectional);
  EXPECT_EQ(sp.size(), 2u);
  m.forward(ids.data(), T, kv, s, LogitsMode::All, logits, &sp);
  double d = 0;
  const auto pos = ref().j["positions"].get<std::vector<int>>();
  for (size_t k = 0; k < pos.size(); ++k)
    for (int i = 0; i < V; ++i)
      d = std::max(d, std::abs(static_cast<double>(logits[static_cast<size_t>(pos[k]) * V + i]) - want[k * V + i]));
  return d;
}

}  // namespace

TEST(Gemma4VisionMask, ConfigFlag) {
  auto m = Model::load_dir(fixture());
  EXPECT_TRUE(m->config().image_blocks_sliding_only);
  // E2B-like wrapper (use_bidirectional_attention null): unset.
  auto w = Model::load_dir(egtest::source_dir() + "/tests/fixtures/gemma4-random-wrapper");
  EXPECT_FALSE(w->config().image_blocks_sliding_only);
}

TEST(Gemma4VisionMask, LogitsMatchTransformers) {
  auto m = Model::load_dir(fixture());
  ASSERT_EQ(ref().j["max_abs_diff_vs_explicit_rule_masks"]["C"].get<double>(), 0.0);
  const double d = run(*m, 128, true, ref().logits);
  EXPECT_LT(d, 1e-3);
  std::printf("vision mask: max |logits - transformers| = %.3g\n", d);
  // The same rows kept causal give transformers' zeroed-mm_token_type_ids logits, and differ.
  EXPECT_LT(run(*m, 128, false, ref().causal), 1e-3);
  EXPECT_GT(run(*m, 128, false, ref().logits), 1.0);
}

TEST(Gemma4VisionMask, BlockAcrossKvPages) {
  // Pages of 8: the first block (positions 7..18) spans three pages, the second (27..36) two.
  auto m = Model::load_dir(fixture());
  EXPECT_LT(run(*m, 8, true, ref().logits), 1e-3);
}

// A GGUF keeps the rule: our quantize writes edgegemma.use_bidirectional_attention; a GGUF
// without the key (llama.cpp's converter writes none) infers it from the per-layer embeddings.
TEST(Gemma4VisionMask, GgufKeepsTheRule) {
  const std::string d = egtest::make_temp_dir();
  const std::string g = egtest::shared_dir() + "/models/gguf";
  // llama.cpp-made files: tiny-gemma4 has per-layer embeddings (E2B-like): causal; tiny-gemma4-moe
  // has none (26B-like): the "vision" rule.
  EXPECT_FALSE(Model::load_gguf(g + "/tiny-gemma4/tiny-gemma4-q8_0.gguf")->config().image_blocks_sliding_only);
  EXPECT_TRUE(Model::load_gguf(g + "/tiny-gemma4-moe/tiny-gemma4-moe-q8_0.gguf")->config().image_blocks_sliding_only);
  // Ours: the key, whatever the shape says.
  GGUFQuantizeOptions o;
  o.type = "q8_0";
  quantize_to_gguf(egtest::shared_dir() + "/models/tiny-gemma4", d + "/none.gguf", o);
  EXPECT_FALSE(Model::load_gguf(d + "/none.gguf")->config().image_blocks_sliding_only);
  auto with = [&](const std::string& out, const char* v) {
    egtest::rewrite(d + "/none.gguf", out, [v](egtest::GKV& kv, auto&) {
      if (v) egtest::set_kv(kv, "edgegemma.use_bidirectional_attention", GGUFValue::str(v));
      else egtest::drop_kv(kv, [](const std::string& k) { return k == "edgegemma.use_bidirectional_attention"; });
    });
    return out;
  };
  EXPECT_TRUE(Model::load_gguf(with(d + "/vision.gguf", "vision"))->config().image_blocks_sliding_only);
  EXPECT_FALSE(Model::load_gguf(with(d + "/nokey.gguf", nullptr))->config().image_blocks_sliding_only);
  EXPECT_THROW(Model::load_gguf(with(d + "/all.gguf", "all")), Error);
}
