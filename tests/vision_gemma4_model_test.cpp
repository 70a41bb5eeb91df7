// Images in the Gemma 4 text model against transformers 5.17 (tiny-gemma4-mm, the 11 image
// cases: 5 images × chat/plain + two images in one message): the processor's input_ids
// (placeholder expansion <|image> + N × <|image|> + <image|>, N per image), last-position logits
// (tolerance 1e-3, the README's) and 24 greedy ids. Gemma 4 E2B/E4B keep image rows causal
// (transformers' logits do not move when mm_token_type_ids is zeroed) and use the pad row of the
// per-layer embedding at image positions; both are checked to matter below.
#include <gtest/gtest.h>

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
    const std::string d = egtest::g4mm_dir();
    f.lm = LoadedModel::load(d);
    f.enc = ImageEncoder::load(*f.lm, d);
    f.ref = egtest::read_json(d + "/reference.json");
    f.arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
    return f;
  }();
  return f;
}

bool image_case(const nlohmann::json& c) {
  for (const auto& m : c["media"])
    if (m.get<std::string>().rfind("img_", 0) != 0) return false;
  return true;
}

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
    v.push_back(vision::load_image_file(egtest::g4mm_dir() + "/" +
                                        fx().ref["images"][id.get<std::string>()]["file"].get<std::string>()));
  return v;
}

std::vector<float> prefill_logits(const std::vector<int32_t>& ids, const std::vector<EmbedSpan>& spans) {
  const StepExecutor& ex = fx().lm->executor();
  KVCacheOptions o;
  o.type = KVType::F32;
  o.max_tokens = 1024;
  auto kv = ex.new_kv_cache(o);
  auto ws = ex.new_workspace();
  std::vector<float> logits;
  ex.prefill_media(ids.data(), static_cast<int>(ids.size()), spans, *kv, *ws, LogitsMode::Last, logits);
  return logits;
}

}  // namespace

TEST(VisionGemma4Model, ImageCasesMatchTransformers) {
  Fixture& f = fx();
  int n = 0;
  double worst = 0;
  for (const auto& c : f.ref["cases"]) {
    if (!image_case(c)) continue;
    const std::string id = c["id"];
    SCOPED_TRACE(id);
    const ImagePrompt p = build_image_prompt(*f.lm, *f.enc, case_text(c), case_images(c), false);
    EXPECT_EQ(p.ids, c["input_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(p.tokens_per_image.size(), c["media"].size());
    const std::vector<float> logits = prefill_logits(p.ids, p.spans);
    const auto want = f.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 1e-3) << "max logit " << d.max_ref;
    worst = std::max(worst, d.max_abs);
    std::printf("%s: logits_last max|d| %.3g\n", id.c_str(), d.max_abs);
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
  std::printf("worst logits_last max|d| %.3g over %d cases\n", worst, n);
}

// The rules the test above relies on can fail: bidirectional image rows, or the image rows
// without their soft tokens, move the logits far beyond the tolerance.
TEST(VisionGemma4Model, CausalImageRowsAndSoftTokensMatter) {
  Fixture& f = fx();
  const auto& c = f.ref["cases"][0];  // chat.img_gradient_224x224
  ASSERT_EQ(c["id"], "chat.img_gradient_224x224");
  const ImagePrompt p = build_image_prompt(*f.lm, *f.enc, case_text(c), case_images(c), false);
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_FALSE(p.spans[0].bidirectional);
  const auto want = f.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
  std::vector<EmbedSpan> bidir = p.spans;
  bidir[0].bidirectional = true;
  auto l = prefill_logits(p.ids, bidir);
  EXPECT_GT(egtest::diff(l.data(), want.data(), want.size()).max_abs, 1e-2);
  l = prefill_logits(p.ids, {});  // the placeholder rows' own embeddings (and PLE rows)
  EXPECT_GT(egtest::diff(l.data(), want.data(), want.size()).max_abs, 1e-2);
}

TEST(VisionGemma4Model, PromptErrors) {
  Fixture& f = fx();
  const auto imgs = case_images(f.ref["cases"][1]);  // plain.img_gradient_224x224
  EXPECT_EQ(f.enc->marker(), "<|image|>");
  EXPECT_EQ(f.enc->tokens_for(imgs[0]), 256);
  std::vector<vision::RgbImage> two = {imgs[0], imgs[0]};
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, "<|image|>x", two, false), Error);
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, "no marker", imgs, false), Error);
  // A hand-typed expansion of the wrong length is refused.
  EXPECT_THROW(build_image_prompt(*f.lm, *f.enc, "<|image><|image|><|image|><image|><|image|>", imgs, false), Error);
  // Gemma 3's tower is not Gemma 4's: the Gemma 3 vision fixture's encoder on this text model.
  try {
    ImageEncoder::load(*f.lm, egtest::g3v_dir());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not belong to this text model"), std::string::npos) << e.what();
  }
}
