// AWQ (src/quant/awq.h): on a random layer with outlier input channels the scaled layer's
// quantization error (recomputed here in double, also with a quantizer written in this test) is
// lower than plain quantization's; folding the scales into a real model leaves its float logits
// unchanged (tiny-gemma3 with o→v folding and GQA; tiny-gemma4 with v_norm, KV sharing, PLE);
// two runs are bit-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "quant/awq.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using eg::quant::AwqSlot;

namespace {

// Independent 4-bit round trip written for this test: symmetric, groups of 32, scale = max|w|/7.
void rt4(const float* in, int64_t n, float* out) {
  for (int64_t g = 0; g < n; g += 32) {
    double mx = 0;
    for (int64_t i = g; i < g + 32; ++i) mx = std::max(mx, std::fabs(static_cast<double>(in[i])));
    const double d = mx / 7.0;
    for (int64_t i = g; i < g + 32; ++i)
      out[i] = d == 0 ? 0.0f : static_cast<float>(d * std::clamp(std::round(in[i] / d), -8.0, 7.0));
  }
}

// Σ_t,n ( Σ_k xs[t,k]·Q(W·diag s)[n,k] − Σ_k x[t,k]·W[n,k] )² in double.
double layer_error(const std::vector<float>& W, int64_t N, int64_t K, const std::vector<float>& x, int64_t S,
                   const std::vector<float>& s, const eg::quant::RowRoundTrip& q) {
  std::vector<float> ws(W.size()), wq(W.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) ws[n * K + k] = W[n * K + k] * s[k];
  for (int64_t n = 0; n < N; ++n) q(ws.data() + n * K, K, wq.data() + n * K);
  double err = 0;
  for (int64_t t = 0; t < S; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double a = 0, b = 0;
      for (int64_t k = 0; k < K; ++k) {
        a += static_cast<double>(x[t * K + k]) / s[k] * wq[n * K + k];
        b += static_cast<double>(x[t * K + k]) * W[n * K + k];
      }
      err += (a - b) * (a - b);
    }
  return err;
}

std::vector<float> activations(int64_t S, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(S * K);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t k = 0; k < K; ++k) x[t * K + k] = nd(rng) * (k % 37 == 5 ? 30.0f : 1.0f);  // outlier channels
  return x;
}

TEST(Awq, ScalesBeatPlainQuantizationOnOutlierChannels) {
  const int64_t N = 96, K = 256, S = 128;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> W(N * K);
  for (auto& w : W) w = nd(rng);
  const std::vector<float> x = activations(S, K, 1), held_out = activations(S, K, 2);
  std::vector<double> mean_abs(K, 0.0);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t k = 0; k < K; ++k) mean_abs[k] += std::fabs(x[t * K + k]) / S;
  const std::vector<float> ones(K, 1.0f);
  for (const auto& [name, q] : std::vector<std::pair<std::string, eg::quant::RowRoundTrip>>{
           {"test 4-bit", rt4}, {"Q4_0", eg::quant::round_trip_of(eg::DType::Q4_0)},
           {"EG_Q4_G128", eg::quant::round_trip_of(eg::DType::EG_Q4_G128)}}) {
    const eg::quant::AwqScaleSearch r = eg::quant::awq_search_scales({W.data()}, {N}, K, x.data(), S, mean_abs, 20, {q});
    ASSERT_EQ(r.scales.size(), static_cast<size_t>(K)) << name;
    EXPECT_GT(r.alpha, 0.0f) << name;
    const double plain = layer_error(W, N, K, x, S, ones, q), awq = layer_error(W, N, K, x, S, r.scales, q);
    EXPECT_NEAR(r.err_plain, plain, 1e-3 * plain) << name;
    EXPECT_NEAR(r.err_best, awq, 1e-3 * awq) << name;
    EXPECT_LT(awq, 0.8 * plain) << name;
    // It generalises to activations it did not see.
    const double plain2 = layer_error(W, N, K, held_out, S, ones, q), awq2 = layer_error(W, N, K, held_out, S, r.scales, q);
    EXPECT_LT(awq2, 0.8 * plain2) << name;
    std::printf("[ info ] %s: alpha %.2f, error %.4g -> %.4g (held out %.4g -> %.4g)\n", name.c_str(), r.alpha, plain,
                awq, plain2, awq2);
    // Normalisation: sqrt(max·min) == 1.
    const auto [mn, mx] = std::minmax_element(r.scales.begin(), r.scales.end());
    EXPECT_NEAR(std::sqrt(static_cast<double>(*mn) * *mx), 1.0, 1e-5);
  }
}

TEST(Awq, ClippingNeverIncreasesTheBlockError) {
  const int64_t N = 8, K = 64, S = 32;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> W(N * K);
  for (auto& w : W) w = nd(rng) * (rng() % 29 == 0 ? 6.0f : 1.0f);  // a few large weights
  const std::vector<float> x = activations(S, K, 4);
  std::vector<float> clipped = W;
  eg::quant::awq_clip_weight(clipped.data(), N, K, x.data(), S, 32, 10, rt4);
  EXPECT_NE(clipped, W);  // something was clipped
  // The clipped weight, quantized, is no worse than the original quantized (ratio 1 is in the grid).
  const std::vector<float> ones(K, 1.0f);
  std::vector<float> qc(W.size());
  double e_clip = 0, e_plain = 0;
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> qw(K), qcr(K);
    rt4(W.data() + n * K, K, qw.data());
    rt4(clipped.data() + n * K, K, qcr.data());
    for (int64_t t = 0; t < S; ++t)
      for (int64_t b = 0; b < K; b += 32) {
        double d1 = 0, d2 = 0;
        for (int64_t k = b; k < b + 32; ++k) {
          d1 += static_cast<double>(x[t * K + k]) * (qw[k] - W[n * K + k]);
          d2 += static_cast<double>(x[t * K + k]) * (qcr[k] - W[n * K + k]);
        }
        e_plain += d1 * d1;
        e_clip += d2 * d2;
      }
  }
  EXPECT_LE(e_clip, e_plain);
  EXPECT_THROW(eg::quant::awq_clip_weight(clipped.data(), N, K, x.data(), S, 48, 10, rt4), eg::Error);
}

std::vector<int32_t> calib(const std::string& model_dir, int64_t n) {
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(model_dir);
  const std::string text = egtest::read_file(egtest::shared_dir() + "/data/corpus/train.txt").substr(0, 400000);
  return eg::quant::awq_calibration_tokens(tok, text, n);
}

// Writes `src`'s config and every tensor, the AWQ-modified ones as F32, into a fresh directory.
std::string write_folded(const std::string& src, const eg::Model& m, const eg::quant::AwqResult& r) {
  const std::string dir = egtest::make_temp_dir();
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(src + "/" + f)) fs::copy_file(src + "/" + f, dir + "/" + f);
  const eg::TensorStore store = eg::TensorStore::open_dir(src);
  std::vector<eg::TensorToWrite> out;
  std::set<std::string> replaced;
  for (const eg::quant::AwqTensor& t : r.tensors) {
    const std::string name = eg::quant::awq_hf_tensor_name(m.weights().prefix, t.layer, t.slot);
    const eg::TensorInfo* orig = store.find(name);
    EXPECT_NE(orig, nullptr) << name;
    if (orig) EXPECT_EQ(orig->shape, t.shape) << name;
    out.push_back({name, eg::DType::F32, t.shape, t.data.data()});
    replaced.insert(name);
  }
  for (const std::string& name : store.names()) {
    if (replaced.count(name)) continue;
    const eg::TensorInfo* t = store.find(name);
    out.push_back({name, t->dtype, t->shape, t->data});
  }
  eg::write_safetensors(dir + "/model.safetensors", out);
  return dir;
}

std::vector<float> logits_of(const eg::Model& m, const std::vector<int32_t>& ids) {
  eg::KVCache kv(m.config(), static_cast<int>(ids.size()));
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::All, logits);
  return logits;
}

// Folding alone (no quantization) must not change the float model: logits within 1e-4 (f32
// rounding of W·s, (1+w)/s − 1 and x/s; the logits are O(10)).
void expect_fold_exact(const std::string& name, int64_t n_calib, int grid, bool expect_o_fold) {
  const std::string src = egtest::shared_dir() + "/models/" + name;
  auto model = eg::Model::load_dir(src);
  eg::quant::AwqOptions opt;
  opt.target = eg::DType::Q4_0;
  opt.grid = grid;
  opt.sample_rows = 64;
  opt.span = 256;
  const eg::quant::AwqResult r = eg::quant::awq(*model, calib(src, n_calib), opt);
  int scaled = 0, o_folded = 0;
  for (const auto& g : r.groups) {
    scaled += g.alpha > 0;
    if (g.group == "o" && g.note.empty()) ++o_folded;
    EXPECT_LE(g.err_awq, g.err_plain) << name << " layer " << g.layer << " " << g.group;
  }
  EXPECT_GT(scaled, 0) << name << ": nothing was scaled; the test would prove nothing";
  if (expect_o_fold) EXPECT_GT(o_folded, 0) << name;
  else EXPECT_EQ(o_folded, 0) << name;  // v_norm: folding o into v would not be exact
  EXPECT_FALSE(r.tensors.empty());

  auto folded = eg::Model::load_dir(write_folded(src, *model, r));
  const eg::Tokenizer tok = eg::Tokenizer::load_dir(src);
  const std::vector<int32_t> ids =
      tok.encode("It is a truth universally acknowledged, that a single man in possession of a good fortune", true);
  const std::vector<float> a = logits_of(*model, ids), b = logits_of(*folded, ids);
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a[i])));
  }
  std::printf("[ info ] %s: %zu tensors folded, %d groups scaled; max |logit diff| %.3g (max |logit| %.1f)\n",
              name.c_str(), r.tensors.size(), scaled, max_diff, max_abs);
  EXPECT_LT(max_diff, 1e-4) << name;
}

TEST(Awq, FoldingKeepsTinyGemma3Logits) { expect_fold_exact("tiny-gemma3", 1024, 10, true); }

TEST(Awq, FoldingKeepsTinyGemma4Logits) { expect_fold_exact("tiny-gemma4", 512, 5, false); }

TEST(Awq, FoldingKeepsTinyGemma2Logits) { expect_fold_exact("tiny-gemma2", 512, 5, true); }  // GQA 4:2, softcaps

// MoE beside the dense MLP (its norms and experts untouched), a K=V full layer; Gemma 4 always has
// v_norm, so no o→v fold anywhere.
TEST(Awq, FoldingKeepsTinyGemma4MoeLogits) { expect_fold_exact("tiny-gemma4-moe", 512, 5, false); }

TEST(Awq, Deterministic) {
  const std::string src = egtest::shared_dir() + "/models/tiny-gemma3";
  auto model = eg::Model::load_dir(src);
  eg::quant::AwqOptions opt;
  opt.target = eg::DType::Q4_0;
  opt.target_for = [](int layer, AwqSlot s) { return s == AwqSlot::Down && layer == 0 ? eg::DType::Q8_0 : eg::DType::Q4_0; };
  opt.grid = 4;
  opt.sample_rows = 32;
  opt.span = 128;
  opt.clip = true;
  opt.clip_steps = 4;
  const std::vector<int32_t> ids = calib(src, 384);
  ASSERT_EQ(ids.size(), 384u);
  const eg::quant::AwqResult a = eg::quant::awq(*model, ids, opt), b = eg::quant::awq(*model, ids, opt);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  ASSERT_FALSE(a.tensors.empty());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].layer, b.tensors[i].layer);
    EXPECT_EQ(a.tensors[i].slot, b.tensors[i].slot);
    EXPECT_EQ(a.tensors[i].data, b.tensors[i].data);  // bit-identical
  }
  for (size_t i = 0; i < a.groups.size(); ++i) EXPECT_EQ(a.groups[i].alpha, b.groups[i].alpha);
  EXPECT_THROW(eg::quant::awq(*model, {2}, opt), eg::Error);
  opt.grid = 0;
  EXPECT_THROW(eg::quant::awq(*model, ids, opt), eg::Error);
}

}  // namespace
