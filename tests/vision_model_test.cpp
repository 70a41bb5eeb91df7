// Images in the Gemma 3 text model against transformers 5.17 (tiny-gemma3-vision cases: the
// processor's input_ids, last-position logits and 24 greedy ids), plus the bidirectional image
// block across KV pages and the errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "tokenizer/chat_template.h"
#include "vision_test_util.h"

using namespace eg;

namespace {

struct Fixture {
  std::unique_ptr<LoadedModel> lm;
  std::unique_ptr<ImageEncoder> enc;
  nlohmann::json ref;
  std::map<std::string, egtest::RefArray> arrays;
};

Fixture& fx() {
  static Fixture f = [] {
    Fixture f;
    const std::string d = egtest::g3v_dir();
    f.lm = LoadedModel::load(d);
    f.enc = ImageEncoder::load(*f.lm, d);
    f.ref = egtest::read_json(d + "/reference.json");
    f.arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
    return f;
  }();
  return f;
}

// The case's prompt text as the engine builds it: chat cases rendered by the checkpoint's own
// template (image items become the marker), plain cases as given.
std::string case_text(const nlohmann::json& c) {
  if (c["kind"] == "chat") {
    ChatOptions opt;
    opt.add_generation_prompt = true;
    opt.bos_token = "<bos>";
    opt.eos_token = "<eos>";
    return ChatTemplate(fx().lm->chat_template()).render(c["messages"], opt);
  }
  return c["text"].get<std::string>();
}

std::vector<vision::RgbImage> case_images(const nlohmann::json& c) {
  std::vector<vision::RgbImage> v;
  for (const auto& id : c["media"])
    v.push_back(vision::load_image_file(egtest::g3v_dir() + "/" + fx().ref["images"][id.get<std::string>()]["file"].get<std::string>()));
  return v;
}

std::vector<float> prefill_logits(const ImagePrompt& p, int page_tokens, KVCache** out_kv = nullptr) {
  const StepExecutor& ex = fx().lm->executor();
  KVCacheOptions o;
  o.type = KVType::F32;
  o.page_tokens = page_tokens;
  o.max_tokens = 256;
  static std::unique_ptr<KVCache> keep;
  keep = ex.new_kv_cache(o);
  auto ws = ex.new_workspace();
  std::vector<float> logits;
  ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *keep, *ws, LogitsMode::Last, logits);
  if (out_kv) *out_kv = keep.get();
  return logits;
}

}  // namespace

TEST(VisionModel, Gemma3CasesMatchTransformers) {
  Fixture& f = fx();
  int n = 0;
  for (const auto& c : f.ref["cases"]) {
    const std::string id = c["id"];
    SCOPED_TRACE(id);
    const ImagePrompt p = build_image_prompt(*f.lm, *f.enc, case_text(c), case_images(c), false);
    EXPECT_EQ(p.ids, c["input_ids"].get<std::vector<int32_t>>());
    // The rows inserted are exactly the per-image soft tokens (tower test: ≤ 4e-7 of max).
    const std::vector<float> logits = prefill_logits(p, 128);
    const auto want = f.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 1e-3) << "max logit " << d.max_ref;
    std::printf("%s: logits_last max|d| %.3g\n", id.c_str(), d.max_abs);
    // 24 greedy ids, not stopping at <eos> / <end_of_turn>, as the reference.
    GenerateOptions g;
    g.max_new_tokens = 24;
    g.ignore_eos = true;
    g.sampling.temperature = 0.0f;
    g.kv.type = KVType::F32;
    g.media = p.spans;
    const GenerationResult r = generate(f.lm->executor(), p.ids, {}, g, nullptr);
    EXPECT_EQ(r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
    ++n;
  }
  EXPECT_EQ(n, 11);
}

TEST(VisionModel, BidirectionalBlockAcrossPagesAndItsEffect) {
  Fixture& f = fx();
  const auto& c = f.ref["cases"][0];  // chat.img_gradient: the image block starts at position 4
  const ImagePrompt p = build_image_prompt(*f.lm, *f.enc, case_text(c), case_images(c), false);
  const std::vector<float> a = prefill_logits(p, 128);
  // Pages of 8 positions: the 16-token block spans 3 pages and must still be one bidirectional
  // block; every op is row-independent, so the logits are bit-identical.
  EXPECT_EQ(prefill_logits(p, 8), a);
  // Causal image rows (token types zeroed): transformers' logits move by 0.15 on this case.
  ImagePrompt causal = p;
  for (auto& s : causal.spans) s.bidirectional = false;
  const std::vector<float> b = prefill_logits(causal, 128);
  const auto d = egtest::diff(b.data(), a.data(), a.size());
  EXPECT_NEAR(d.max_abs, c["logit_change_if_token_types_zeroed"].get<double>(), 2e-3);
}

TEST(VisionModel, ErrorsLeaveTheCacheAlone) {
  Fixture& f = fx();
  const auto& c = f.ref["cases"][1];  // plain.img_gradient
  const auto imgs = case_images(c);
  std::vector<vision::RgbImage> two = {imgs[0], imgs[0]};
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, case_text(c), two, false), Error);
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, "no marker", imgs, false), Error);
  // Placeholder text typed by hand breaks the run length.
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, "<image_soft_token><start_of_image>x", imgs, false), Error);
  // An image block that would lose sliding-window keys to the rollback margin: 200 text tokens
  // (window 128), then an image spanning 3 pages of 8 with a margin of 8.
  const StepExecutor& ex = f.lm->executor();
  KVCacheOptions o;
  o.type = KVType::F32;
  o.page_tokens = 8;
  o.rollback_margin_tokens = 8;
  o.max_tokens = 512;
  auto kv = ex.new_kv_cache(o);
  auto ws = ex.new_workspace();
  std::vector<int32_t> text(203, 400);
  std::vector<float> logits;
  ex.prefill(text.data(), static_cast<int>(text.size()), *kv, *ws, LogitsMode::None, logits);
  ImagePrompt p = build_image_prompt(*f.lm, *f.enc, case_text(c), imgs, true);
  EXPECT_THROW(ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *kv, *ws, LogitsMode::Last, logits),
               Error);
  EXPECT_EQ(kv->n_past(), 203);
  // A span outside the call.
  std::vector<EmbedSpan> bad = {EmbedSpan{0, 1000, p.soft[0].data(), true}};
  EXPECT_THROW(ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), bad, *kv, *ws, LogitsMode::Last, logits), Error);
  EXPECT_EQ(kv->n_past(), 203);
}

TEST(VisionModel, TextOnlyModelHasNoVisionTower) {
  auto lm = LoadedModel::load(egtest::shared_dir() + "/models/tiny-gemma3");
  try {
    ImageEncoder::load(*lm, egtest::shared_dir() + "/models/tiny-gemma3");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model has no vision tower"), std::string::npos) << e.what();
  }
}
