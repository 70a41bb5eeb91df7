// The Gemma 4 audio tower + embed_audio against transformers 5.17 (sdpa; tiny-gemma4-mm:
// aud.<clip>.tower_hidden [n, 192] and soft_tokens [n, 256]), fed the reference input_features
// and our own: max |Δ| ≤ 3e-5 · max|ref| (the README's tolerance). The clip bounds, the relative
// positions and the window bound are each shown to matter.
#include <gtest/gtest.h>

#include "audio/audio.h"
#include "audio/features.h"
#include "audio/gemma4_audio.h"
#include "audio_test_util.h"
#include "core/error.h"
#include "format/safetensors.h"

using namespace eg;

namespace {

struct Fx {
  TensorStore store;
  audio::AudioConfig cfg;
  std::map<std::string, egtest::RefArray> arrays;
  nlohmann::json ref;
};

Fx& fx() {
  static Fx f = [] {
    Fx f;
    const std::string d = egtest::g4mm_dir();
    f.store = TensorStore::open_dir(d);
    f.cfg = audio::load_audio_config(d);
    f.arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
    f.ref = egtest::read_json(d + "/reference.json");
    return f;
  }();
  return f;
}

}  // namespace

TEST(AudioTower, Config) {
  const auto& c = fx().cfg;
  EXPECT_TRUE(c.present);
  EXPECT_EQ(c.hidden, 128);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.conv_channels, (std::vector<int>{128, 16}));
  EXPECT_EQ(c.output_dims, 192);
  EXPECT_EQ(c.text_hidden, 256);
  EXPECT_EQ(c.audio_token_id, 63);
  EXPECT_EQ(c.boa_id, 61);
  EXPECT_EQ(c.eoa_id, 65);
  EXPECT_FALSE(audio::load_audio_config(egtest::shared_dir() + "/models/tiny-gemma3-vision").present);
}

TEST(AudioTower, MatchesTransformers) {
  Fx& f = fx();
  const audio::Gemma4AudioTower tower(f.cfg, f.store);
  const audio::FeatureExtractor fe(audio::load_feature_config(egtest::g4mm_dir()));
  for (const char* id : {"aud_chirp_1p3s", "aud_tone_noise_4p7s"}) {
    SCOPED_TRACE(id);
    const auto& r = f.ref["audio"][id];
    const int valid = r["num_valid_frames"], ntok = r["num_soft_tokens"];
    EXPECT_EQ(audio::Gemma4AudioTower::tokens_for_frames(valid), ntok);
    const auto feats = f.arrays.at(std::string("aud.") + id + ".input_features").f32();
    const auto th = f.arrays.at(std::string("aud.") + id + ".tower_hidden").f32();
    const auto st = f.arrays.at(std::string("aud.") + id + ".soft_tokens").f32();
    // From the reference features, and from ours (decoded from the WAV).
    const audio::Pcm p = audio::load_audio_file(egtest::clip_path(id));
    const audio::Features ours = fe.extract(p.samples.data(), static_cast<int64_t>(p.samples.size()));
    for (const float* in : {feats.data(), ours.values.data()}) {
      std::vector<float> soft, hidden;
      tower.encode(in, valid, 128, soft, &hidden);
      ASSERT_EQ(hidden.size(), th.size());
      ASSERT_EQ(soft.size(), st.size());
      const auto dh = egtest::diff(hidden.data(), th.data(), th.size());
      const auto ds = egtest::diff(soft.data(), st.data(), st.size());
      EXPECT_LE(dh.max_abs, 3e-5 * dh.max_ref);
      EXPECT_LE(ds.max_abs, 3e-5 * ds.max_ref);
      std::printf("%s (%s features): tower_hidden max|d| %.3g (max %.3g), soft_tokens max|d| %.3g (max %.3g)\n", id,
                  in == feats.data() ? "reference" : "our", dh.max_abs, dh.max_ref, ds.max_abs, ds.max_ref);
    }
  }
}

// The comparison above can fail: without the clip bounds the soft tokens move far off.
TEST(AudioTower, ClipBoundsMatter) {
  Fx& f = fx();
  audio::AudioConfig c = f.cfg;
  c.clipped_linears = false;
  const audio::Gemma4AudioTower tower(c, f.store);
  const auto feats = f.arrays.at("aud.aud_chirp_1p3s.input_features").f32();
  const auto st = f.arrays.at("aud.aud_chirp_1p3s.soft_tokens").f32();
  std::vector<float> soft;
  tower.encode(feats.data(), 129, 128, soft);
  const auto d = egtest::diff(soft.data(), st.data(), st.size());
  EXPECT_GT(d.max_abs, 0.05 * d.max_ref);
  // A window one frame wider (Gemma 3n's δ ≤ 12) moves them too.
  c = f.cfg;
  c.context_left = 14;
  audio::Gemma4AudioTower(c, f.store).encode(feats.data(), 129, 128, soft);
  const auto d2 = egtest::diff(soft.data(), st.data(), st.size());
  EXPECT_GT(d2.max_abs, 1e-3 * d2.max_ref);
  std::printf("no clip bounds: %.3g of max; window 13: %.3g of max\n", d.max_abs / d.max_ref, d2.max_abs / d2.max_ref);
}

TEST(AudioTower, BadInput) {
  Fx& f = fx();
  const audio::Gemma4AudioTower tower(f.cfg, f.store);
  std::vector<float> soft, x(128 * 4, 0.0f);
  EXPECT_THROW(tower.encode(x.data(), 0, 128, soft), Error);
  EXPECT_THROW(tower.encode(x.data(), 4, 64, soft), Error);
  tower.encode(x.data(), 1, 128, soft);  // one frame (10 ms) → one token
  EXPECT_EQ(soft.size(), 256u);
  // No audio tower: the Gemma 3 vision fixture.
  const TensorStore st = TensorStore::open_dir(egtest::shared_dir() + "/models/tiny-gemma3-vision");
  try {
    audio::Gemma4AudioTower t(f.cfg, st);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no audio tower"), std::string::npos) << e.what();
  }
}
