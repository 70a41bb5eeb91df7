// Gemma 3's SigLIP tower + projector against transformers 5.17 (tiny-gemma3-vision:
// img.<id>.tower_hidden and img.<id>.soft_tokens, computed in fp32 from the bf16 checkpoint).
// Tolerance: the fixture README's 3e-5 · max|ref| (10x the measured CPU-vs-GPU noise).
#include <gtest/gtest.h>

#include "core/error.h"
#include "format/safetensors.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/siglip.h"
#include "vision/vision_config.h"
#include "vision_test_util.h"

using namespace eg::vision;

TEST(SiglipTower, MatchesTransformers) {
  const std::string d = egtest::g3v_dir();
  const VisionConfig vc = load_vision_config(d);
  ASSERT_EQ(vc.kind, TowerKind::Siglip);
  EXPECT_EQ(vc.mm_tokens_per_image, 16);
  EXPECT_EQ(vc.image_token_id, 62);
  const eg::TensorStore store = eg::TensorStore::open_dir(d);
  const SiglipTower tower(vc, store);
  const auto ref = egtest::read_json(d + "/reference.json");
  const auto arrays = egtest::read_ref_arrays(d + "/reference_arrays.safetensors");
  const ImageProcessorConfig pc = load_image_processor_config(d, false);
  int n = 0;
  for (auto it = ref["images"].begin(); it != ref["images"].end(); ++it, ++n) {
    // Our own preprocessing (bit-exact with the processor: vision_preprocess_test).
    const std::vector<float> pv = gemma3_pixel_values(load_image_file(d + "/" + it.value()["file"].get<std::string>()), pc);
    std::vector<float> soft, hidden;
    tower.encode(pv.data(), soft, &hidden);
    const auto want_h = arrays.at("img." + it.key() + ".tower_hidden").f32();
    const auto want_s = arrays.at("img." + it.key() + ".soft_tokens").f32();
    ASSERT_EQ(hidden.size(), want_h.size());
    ASSERT_EQ(soft.size(), want_s.size());
    const auto dh = egtest::diff(hidden.data(), want_h.data(), hidden.size());
    const auto ds = egtest::diff(soft.data(), want_s.data(), soft.size());
    EXPECT_LE(dh.max_abs, 3e-5 * dh.max_ref) << it.key();
    EXPECT_LE(ds.max_abs, 3e-5 * ds.max_ref) << it.key();
    std::printf("%s: tower_hidden max|d| %.3g (max %.3g), soft_tokens max|d| %.3g (max %.3g)\n", it.key().c_str(),
                dh.max_abs, dh.max_ref, ds.max_abs, ds.max_ref);
  }
  EXPECT_EQ(n, 5);
}

TEST(SiglipTower, TextOnlyCheckpointHasNoTower) {
  const std::string text = egtest::shared_dir() + "/models/tiny-gemma3";
  EXPECT_EQ(load_vision_config(text).kind, TowerKind::None);
  const eg::TensorStore store = eg::TensorStore::open_dir(text);
  VisionConfig vc = load_vision_config(egtest::g3v_dir());
  try {
    SiglipTower t(vc, store);
    FAIL() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model has no vision tower"), std::string::npos) << e.what();
  }
  // A config that disagrees with the tensors: a clear shape error.
  const eg::TensorStore mm = eg::TensorStore::open_dir(egtest::g3v_dir());
  vc.intermediate = 256;
  try {
    SiglipTower t(vc, mm);
    FAIL() << "no error";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fc1.weight: shape [512, 128], expected [256, 128]"), std::string::npos) << e.what();
  }
}
