// Audio in the Gemma 4 text model against transformers 5.17 (tiny-gemma4-mm: the 4 audio cases
// — 2 clips × chat/plain — and chat.image_and_audio): input_ids (<|audio> + n × <|audio|> +
// <audio|>, n from the clip length), last-position logits (≤ 1e-3, the README's) and 24 greedy
// ids. Audio rows are causal and use the pad row of the per-layer embedding; both are shown to
// matter.
#include <gtest/gtest.h>

#include "audio_test_util.h"
#include "core/error.h"
#include "engine/audio_prompt.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "tokenizer/chat_template.h"

using namespace eg;

namespace {

struct Fixture {
  std::unique_ptr<LoadedModel> lm;
  nlohmann::json ref;
  std::map<std::string, egtest::RefArray> arrays;
};

Fixture& fx() {
  static Fixture f = [] {
    Fixture f;
    const std::string d = egtest::g4mm_dir();
    f.lm = LoadedModel::load(d);
    f.ref = egtest::read_json(d + "/reference.json");
    f.arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
    return f;
  }();
  return f;
}

bool has_audio(const nlohmann::json& c) {
  for (const auto& m : c["media"])
    if (m.get<std::string>().rfind("aud_", 0) == 0) return true;
  return false;
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

std::vector<PromptMedium> case_media(const nlohmann::json& c) {
  std::vector<PromptMedium> v;
  for (const auto& j : c["media"]) {
    const std::string id = j;
    PromptMedium m;
    if (id.rfind("aud_", 0) == 0) {
      m.kind = PromptMedium::Kind::Audio;
      m.audio = audio::to_model_rate(audio::load_audio_file(egtest::clip_path(id)));
    } else {
      m.image = vision::load_image_file(egtest::g4mm_dir() + "/" + fx().ref["images"][id]["file"].get<std::string>());
    }
    v.push_back(std::move(m));
  }
  return v;
}

MediaPrompt case_prompt(const nlohmann::json& c) {
  const auto media = case_media(c);
  bool img = false;
  for (const auto& m : media) img = img || m.kind == PromptMedium::Kind::Image;
  return build_media_prompt(*fx().lm, img ? &fx().lm->image_encoder() : nullptr, &fx().lm->audio_encoder(),
                            case_text(c), media, false);
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

TEST(AudioModel, AudioCasesMatchTransformers) {
  Fixture& f = fx();
  int n = 0;
  for (const auto& c : f.ref["cases"]) {
    if (!has_audio(c)) continue;
    const std::string id = c["id"];
    SCOPED_TRACE(id);
    const MediaPrompt p = case_prompt(c);
    EXPECT_EQ(p.ids, c["input_ids"].get<std::vector<int32_t>>());
    const std::vector<float> logits = prefill_logits(p.ids, p.spans);
    const auto want = f.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 1e-3) << "max logit " << d.max_ref;
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
  EXPECT_EQ(n, 5);
}

// The rules the test above relies on can fail: the audio rows without their soft tokens, or
// bidirectional audio rows, move the logits far beyond the tolerance.
TEST(AudioModel, SoftTokensAndCausalRowsMatter) {
  Fixture& f = fx();
  const nlohmann::json* c = nullptr;
  for (const auto& x : f.ref["cases"])
    if (x["id"] == "plain.aud_chirp_1p3s") c = &x;
  ASSERT_TRUE(c);
  const MediaPrompt p = case_prompt(*c);
  ASSERT_EQ(p.spans.size(), 1u);
  EXPECT_EQ(p.tokens_per_medium, std::vector<int>{33});
  const auto want = f.arrays.at((*c)["arrays"]["logits_last"].get<std::string>()).f32();
  auto l = prefill_logits(p.ids, {});
  EXPECT_GT(egtest::diff(l.data(), want.data(), want.size()).max_abs, 1e-2);
  std::vector<EmbedSpan> bidir = p.spans;
  bidir[0].bidirectional = true;
  l = prefill_logits(p.ids, bidir);
  EXPECT_GT(egtest::diff(l.data(), want.data(), want.size()).max_abs, 1e-2);
}

TEST(AudioModel, TokenCountsAndSegments) {
  const AudioEncoder& enc = fx().lm->audio_encoder();
  EXPECT_EQ(enc.marker(), "<|audio|>");
  EXPECT_EQ(enc.tokens_for(16000), std::vector<int>{25});
  EXPECT_EQ(enc.tokens_for(32000), std::vector<int>{50});
  EXPECT_EQ(enc.tokens_for(480000), std::vector<int>{750});
  EXPECT_EQ(enc.tokens_for(480000 + 16000), (std::vector<int>{750, 25}));
  EXPECT_EQ(enc.tokens_for(480000 + 100), std::vector<int>{750});  // under one frame left: dropped
  EXPECT_EQ(enc.tokens_for(161), std::vector<int>{1});
  EXPECT_THROW(enc.tokens_for(160), Error);
  EXPECT_THROW(enc.tokens_for(0), Error);
  EXPECT_THROW(enc.tokens_for(int64_t{16000} * 3600), Error);  // an hour
  EXPECT_EQ(enc.expanded_marker({2}), "<|audio><|audio|><|audio|><audio|>");
  // A 31 s clip: two blocks, 775 soft tokens; each segment equals that segment encoded alone.
  audio::Pcm p;
  for (int i = 0; i < 496000; ++i) p.samples.push_back(0.3f * std::sin(i * 0.01f) + 0.1f * std::sin(i * 0.37f));
  const auto soft = enc.encode(p);
  ASSERT_EQ(soft.size(), 775u * 256);
  audio::Pcm tail;
  tail.samples.assign(p.samples.begin() + 480000, p.samples.end());
  const auto t = enc.encode(tail);
  ASSERT_EQ(t.size(), 25u * 256);
  for (size_t i = 0; i < t.size(); ++i) ASSERT_EQ(soft[750 * 256 + i], t[i]);
}

TEST(AudioModel, PromptErrors) {
  Fixture& f = fx();
  const AudioEncoder& enc = f.lm->audio_encoder();
  PromptMedium m;
  m.kind = PromptMedium::Kind::Audio;
  m.audio = audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s"));
  EXPECT_THROW(build_media_prompt(*f.lm, nullptr, &enc, "no marker", {m}, false), Error);
  EXPECT_THROW(build_media_prompt(*f.lm, nullptr, &enc, "<|audio|><|audio|>", {m}, false), Error);
  EXPECT_THROW(build_media_prompt(*f.lm, nullptr, &enc, "<|audio><|audio|><audio|><|audio|>", {m}, false), Error);
  EXPECT_THROW(build_media_prompt(*f.lm, nullptr, nullptr, "<|audio|>", {m}, false), Error);
  // Models without an audio tower.
  for (const char* d : {"/models/tiny-gemma3-vision", "/models/tiny-gemma4"}) {
    SCOPED_TRACE(d);
    auto lm = LoadedModel::load(egtest::shared_dir() + d);
    try {
      lm->audio_encoder();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no audio tower"), std::string::npos) << e.what();
    }
  }
}
