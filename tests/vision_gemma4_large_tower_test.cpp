// Gemma 4's large (26B/31B) vision tower switches against transformers 5.17: standardize (the
// (Y − std_bias)·std_scale step after pooling) and plain (unclipped) linears, with head dim 24
// (not a power of two: the 2-D RoPE's per-axis halves of 12). The shared fixtures only have the
// on-device tower. Fixture: tests/fixtures/gemma4-large-tower (tools/gen_large_tower_reference.py,
// float32, eager; a random tower on one synthetic 6 × 9 patch grid -> 6 soft tokens; the text
// model's tensors are left out of its model.safetensors: only the tower runs here).
// Tolerance: 3e-5 · max|ref|, as vision_gemma4_tower_test for the on-device tower.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "format/safetensors.h"
#include "vision/gemma4_vision.h"
#include "vision/preprocess.h"
#include "vision/vision_config.h"
#include "vision_test_util.h"

using namespace eg::vision;

namespace {

std::string dir() { return egtest::source_dir() + "/tests/fixtures/gemma4-large-tower"; }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST(Gemma4LargeTower, SoftTokensMatchTransformers) {
  const VisionConfig vc = load_vision_config(dir());
  ASSERT_EQ(vc.kind, TowerKind::Gemma4);
  EXPECT_TRUE(vc.standardize);
  EXPECT_FALSE(vc.clipped_linears);
  EXPECT_EQ(vc.head_dim, 24);
  EXPECT_EQ(vc.hidden, 48);
  const eg::TensorStore store = eg::TensorStore::open_dir(dir());
  const auto ref = egtest::read_json(dir() + "/reference.json");
  const auto a = egtest::read_ref_arrays(dir() + "/reference_arrays.safetensors");
  const auto& pos = a.at("image_position_ids");
  ASSERT_EQ(pos.dtype, "I32");
  Gemma4Patches p;
  p.grid_h = ref["grid"][0];
  p.grid_w = ref["grid"][1];
  p.resized_h = 16 * p.grid_h;
  p.resized_w = 16 * p.grid_w;
  p.num_soft_tokens = ref["num_soft_tokens"];
  p.pixels = a.at("pixel_values").f32();
  p.positions.resize(static_cast<size_t>(pos.numel()));
  std::memcpy(p.positions.data(), pos.bytes.data(), p.positions.size() * 4);
  std::vector<float> soft;
  Gemma4VisionTower(vc, store).encode(p, soft);
  const auto want = a.at("soft_tokens").f32();
  const double d = max_diff(soft, want), m = max_abs(want);
  std::printf("large tower: soft tokens max|d| %.3g (max %.3g)\n", d, m);
  EXPECT_LE(d, 3e-5 * m);
  // The standardize step matters here: without it the tower gives transformers' other run.
  VisionConfig plain = vc;
  plain.standardize = false;
  std::vector<float> soft_plain;
  Gemma4VisionTower(plain, store).encode(p, soft_plain);
  EXPECT_LE(max_diff(soft_plain, a.at("soft_tokens_unstandardized").f32()), 3e-5 * m);
  EXPECT_GT(max_diff(soft_plain, want), 0.1 * m);
}
