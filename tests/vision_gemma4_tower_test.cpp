// Gemma 4's vision tower + embed_vision against transformers 5.17 (tiny-gemma4-mm:
// img.<id>.tower_hidden — pooled 3×3, ×√Hv — and img.<id>.soft_tokens, fp32 from the bf16
// checkpoint, eager attention, padded to 2520 patches; we run the real patches only).
// Tolerance: the fixture README's 3e-5 · max|ref| (10× the measured CPU-vs-GPU noise). The
// clip bounds bite (switching them off moves the soft tokens by ~45 % of their max), and so does
// the 2-D RoPE; both are checked below to fail when dropped.
#include <gtest/gtest.h>

#include <limits>

#include "core/error.h"
#include "format/safetensors.h"
#include "vision/gemma4_vision.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/vision_config.h"
#include "vision_test_util.h"

using namespace eg::vision;

namespace {

struct G4 {
  VisionConfig vc;
  eg::TensorStore store;
  nlohmann::json ref;
  std::map<std::string, egtest::RefArray> arrays;
  ImageProcessorConfig pc;
};

G4& g4() {
  static G4 f = [] {
    const std::string d = egtest::g4mm_dir();
    return G4{load_vision_config(d), eg::TensorStore::open_dir(d), egtest::read_json(d + "/reference.json"),
              egtest::read_ref_arrays(d + "/reference_arrays.safetensors"), load_image_processor_config(d, true)};
  }();
  return f;
}

Gemma4Patches patches_of(const std::string& id) {
  return gemma4_patches(load_image_file(egtest::g4mm_dir() + "/" + g4().ref["images"][id]["file"].get<std::string>()),
                        g4().pc);
}

}  // namespace

TEST(Gemma4VisionTower, ConfigOfTheFixture) {
  const VisionConfig& vc = g4().vc;
  ASSERT_EQ(vc.kind, TowerKind::Gemma4);
  EXPECT_EQ(vc.hidden, 128);
  EXPECT_EQ(vc.head_dim, 32);
  EXPECT_EQ(vc.heads, 4);
  EXPECT_EQ(vc.position_embedding_size, 1024);
  EXPECT_TRUE(vc.clipped_linears);
  EXPECT_FALSE(vc.standardize);
  EXPECT_EQ(vc.boi_id, 60);
  EXPECT_EQ(vc.eoi_id, 64);
  EXPECT_EQ(vc.image_token_id, 62);
  EXPECT_EQ(vc.text_hidden, 256);
}

TEST(Gemma4VisionTower, MatchesTransformers) {
  G4& f = g4();
  const Gemma4VisionTower tower(f.vc, f.store);
  int n = 0;
  for (auto it = f.ref["images"].begin(); it != f.ref["images"].end(); ++it, ++n) {
    SCOPED_TRACE(it.key());
    const Gemma4Patches p = patches_of(it.key());
    // Positions equal the processor's (x, y) of the real patches.
    const auto pos = f.arrays.at("img." + it.key() + ".image_position_ids").i32();
    ASSERT_EQ(p.positions, pos);
    std::vector<float> soft, hidden;
    tower.encode(p, soft, &hidden);
    const auto want_h = f.arrays.at("img." + it.key() + ".tower_hidden").f32();
    const auto want_s = f.arrays.at("img." + it.key() + ".soft_tokens").f32();
    EXPECT_EQ(static_cast<int>(soft.size() / 256), it.value()["processor"]["num_soft_tokens"].get<int>());
    ASSERT_EQ(hidden.size(), want_h.size());
    ASSERT_EQ(soft.size(), want_s.size());
    const auto dh = egtest::diff(hidden.data(), want_h.data(), hidden.size());
    const auto ds = egtest::diff(soft.data(), want_s.data(), soft.size());
    EXPECT_LE(dh.max_abs, 3e-5 * dh.max_ref);
    EXPECT_LE(ds.max_abs, 3e-5 * ds.max_ref);
    std::printf("%s: tower_hidden max|d| %.3g (max %.3g), soft_tokens max|d| %.3g (max %.3g)\n", it.key().c_str(),
                dh.max_abs, dh.max_ref, ds.max_abs, ds.max_ref);
  }
  EXPECT_EQ(n, 5);
}

// The test above can fail: without the clip bounds, or with the positions' axes swapped (RoPE and
// the position table), the soft tokens move far outside the tolerance.
TEST(Gemma4VisionTower, ClipsAndPositionsMatter) {
  G4& f = g4();
  const std::string id = "img_shapes_640x480";
  const auto want = f.arrays.at("img." + id + ".soft_tokens").f32();
  VisionConfig no_clip = f.vc;
  no_clip.clipped_linears = false;
  std::vector<float> soft;
  Gemma4VisionTower(no_clip, f.store).encode(patches_of(id), soft);
  ASSERT_EQ(soft.size(), want.size());
  auto d = egtest::diff(soft.data(), want.data(), want.size());
  EXPECT_GT(d.max_abs, 0.05 * d.max_ref);
  // Swap x and y of every patch (the grid stays): rotations and table rows change.
  Gemma4Patches p = patches_of("img_gradient_224x224");  // square: the swapped grid is valid
  for (size_t n = 0; n < p.positions.size(); n += 2) std::swap(p.positions[n], p.positions[n + 1]);
  Gemma4VisionTower(f.vc, f.store).encode(p, soft);
  const auto want_g = f.arrays.at("img.img_gradient_224x224.soft_tokens").f32();
  d = egtest::diff(soft.data(), want_g.data(), want_g.size());
  EXPECT_GT(d.max_abs, 0.05 * d.max_ref);
}

TEST(Gemma4VisionTower, BadInputAndMissingTensors) {
  G4& f = g4();
  const Gemma4VisionTower tower(f.vc, f.store);
  Gemma4Patches p = patches_of("img_gradient_224x224");
  std::vector<float> soft;
  Gemma4Patches bad = p;
  bad.pixels.pop_back();
  EXPECT_THROW(tower.encode(bad, soft), eg::Error);
  bad = p;
  bad.grid_w -= 1;  // 47 columns: not poolable 3×3
  EXPECT_THROW(tower.encode(bad, soft), eg::Error);
  bad = p;
  bad.positions[0] = 5000;
  EXPECT_THROW(tower.encode(bad, soft), eg::Error);
  // A text-only checkpoint: "this model has no vision tower".
  const eg::TensorStore text = eg::TensorStore::open_dir(egtest::shared_dir() + "/models/tiny-gemma3");
  try {
    Gemma4VisionTower t(f.vc, text);
    FAIL() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model has no vision tower"), std::string::npos) << e.what();
  }
  // A config that disagrees with the tensors: a clear shape error naming the tensor.
  VisionConfig vc = f.vc;
  vc.intermediate = 256;
  try {
    Gemma4VisionTower t(vc, f.store);
    FAIL() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate_proj.linear.weight: shape [512, 128], expected [256, 128]"),
              std::string::npos)
        << e.what();
  }
  // standardize without std_bias / std_scale tensors.
  vc = f.vc;
  vc.standardize = true;
  EXPECT_THROW(Gemma4VisionTower(vc, f.store), eg::Error);
}
