// A checkpoint whose values exceed F16's range in the KV cache (issue: "F16 KV silently
// overflows"): tiny-gemma3 with layer 5's v_proj scaled by 2^14. Gemma 3 normalizes the attention
// output (post_attention_layernorm) before adding it to the residual, so the scaled model computes
// the same function (up to RMSNorm's eps): its float32 greedy ids are transformers' ids for the
// original model (reference.json). Its V values reach ~7e4 > 65504, so with an F16 cache that
// stored them as inf every later token was <pad>; now the layer switches to BF16 and the default
// F16 cache gives the F32 cache's (and transformers') ids, with one warning.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/warning.h"
#include "engine/sampler.h"
#include "format/safetensors.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "test_util.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int kLayer = 5;            // the full-attention layer: its pages are never recycled
constexpr float kScale = 16384.0f;   // 2^14: exact in BF16
constexpr int kNew = 40;

std::string tiny() { return egtest::shared_dir() + "/models/tiny-gemma3"; }

// tiny-gemma3 with model.layers.5.self_attn.v_proj.weight multiplied by 2^14 (exact: a power of
// two only changes BF16 exponents), tokenizer and configs copied. Built once per process.
const std::string& scaled_dir() {
  static const std::string dir = [] {
    const std::string d = egtest::make_temp_dir();
    eg::TensorStore src = eg::TensorStore::open_dir(tiny());
    const std::string name = "model.layers." + std::to_string(kLayer) + ".self_attn.v_proj.weight";
    static std::vector<uint16_t> scaled;
    std::vector<eg::TensorToWrite> all;
    for (const auto& n : src.names()) {
      const eg::TensorInfo* t = src.find(n);
      if (n == name) {
        EXPECT_EQ(t->dtype, eg::DType::BF16);
        size_t count = 1;
        for (auto s : t->shape) count *= static_cast<size_t>(s);
        scaled.resize(count);
        std::memcpy(scaled.data(), t->data, count * 2);
        for (auto& h : scaled) h = eg::f32_to_bf16(eg::bf16_to_f32(h) * kScale);
        all.push_back({n, t->dtype, t->shape, scaled.data()});
      } else {
        all.push_back({n, t->dtype, t->shape, t->data});
      }
    }
    eg::write_safetensors(d + "/model.safetensors", all);
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(tiny() + "/" + f, d + "/" + f);
    return d;
  }();
  return dir;
}

const json& reference() {
  static const json r = json::parse(egtest::read_file(tiny() + "/reference.json"));
  return r;
}

// The reference prompts used here: a short one and the 507-token one (four 128-token pages).
std::vector<json> prompts() {
  std::vector<json> out;
  for (const auto& p : reference()["prompts"])
    if (p["input_ids"].size() == 15 || p["input_ids"].size() > 300) out.push_back(p);
  return out;
}

eg::KVCacheOptions options(eg::KVType t, int page_tokens, int max_tokens) {
  eg::KVCacheOptions o;
  o.type = t;
  o.page_tokens = page_tokens;
  o.max_tokens = max_tokens;
  return o;
}

// Greedy ids: the prompt prefilled in one call, then kNew single-token decode steps.
std::vector<int32_t> greedy(const eg::Model& m, eg::KVCache& kv, const std::vector<int32_t>& ids) {
  eg::ForwardScratch s;
  std::vector<float> logits;
  m.forward(ids.data(), static_cast<int>(ids.size()), kv, s, eg::LogitsMode::Last, logits);
  std::vector<int32_t> out;
  for (int i = 0; i < kNew; ++i) {
    out.push_back(eg::argmax(logits.data(), m.config().vocab_size));
    if (i + 1 < kNew) m.forward(&out.back(), 1, kv, s, eg::LogitsMode::Last, logits);
  }
  return out;
}

std::vector<int32_t> want_ids(const json& p) {
  auto w = p["greedy_new_ids"].get<std::vector<int32_t>>();
  w.resize(kNew);
  return w;
}

// The largest |V| layer kLayer stored (F32 cache) over positions [0, n).
float max_abs_v(const eg::KVCache& kv, int n) {
  const eg::KVLayerView v = kv.view(kLayer);
  float m = 0;
  for (int p = 0; p < n; ++p) {
    const float* row = reinterpret_cast<const float*>(v.pages[p / v.page_tokens] + v.v_off) +
                       static_cast<size_t>(p % v.page_tokens) * v.n_kv_heads * v.head_dim;
    for (int i = 0; i < v.n_kv_heads * v.head_dim; ++i) m = std::max(m, std::fabs(row[i]));
  }
  return m;
}

std::vector<std::string>& captured() {
  static std::vector<std::string> w;
  return w;
}

TEST(KVOverflowModel, ScaledCheckpointIsTheSameModelAndExceedsF16InF32) {
  auto m = eg::Model::load_dir(scaled_dir());
  for (const auto& p : prompts()) {
    const auto ids = p["input_ids"].get<std::vector<int32_t>>();
    eg::KVCache kv(m->config(), options(eg::KVType::F32, 128, static_cast<int>(ids.size()) + kNew));
    EXPECT_EQ(greedy(*m, kv, ids), want_ids(p)) << p["id"];
    EXPECT_GT(max_abs_v(kv, kv.n_past()), 65520.0f) << "the checkpoint must overflow F16: " << p["id"];
  }
}

TEST(KVOverflowModel, DefaultF16KVGivesTheF32Output) {
  captured().clear();
  eg::reset_warnings_for_testing();
  const eg::WarningSink old = eg::set_warning_sink([](const char* t) { captured().push_back(t); });
  auto m = eg::Model::load_dir(scaled_dir());
  for (const auto& p : prompts()) {
    const auto ids = p["input_ids"].get<std::vector<int32_t>>();
    const int cap = static_cast<int>(ids.size()) + kNew;
    for (int P : {128, 8}) {  // 8: the overflow comes after pages were written in F16
      SCOPED_TRACE(p["id"].get<std::string>() + " pages of " + std::to_string(P));
      eg::KVCache ref(m->config(), options(eg::KVType::F32, P, cap));
      eg::KVCache kv(m->config(), options(eg::KVType::F16, P, cap));
      const auto want = greedy(*m, ref, ids);
      const auto got = greedy(*m, kv, ids);
      EXPECT_EQ(got, want);
      EXPECT_EQ(got, want_ids(p)) << "transformers' ids for the unscaled model";
      EXPECT_NE(got[0], 0) << "<pad>";
      for (int l = 0; l < m->config().n_layers; ++l)
        EXPECT_EQ(kv.layer_type(l), l == kLayer ? eg::KVType::BF16 : eg::KVType::F16) << "layer " << l;
    }
  }
  eg::set_warning_sink(old);
  ASSERT_EQ(captured().size(), 1u) << "one warning for all caches and layers";
  EXPECT_NE(captured()[0].find("layer 5"), std::string::npos) << captured()[0];
}

TEST(KVOverflowModel, BatchedDecodeOfF16CachesGivesTheF32Output) {
  // The server's path: forward_batch decodes several caches in one step, each widening on its own.
  auto m = eg::Model::load_dir(scaled_dir());
  const auto ps = prompts();
  ASSERT_EQ(ps.size(), 2u);
  std::vector<std::vector<int32_t>> ids, want, got(2);
  std::vector<eg::KVCache> kvs;
  eg::ForwardScratch s;
  std::vector<float> logits;
  for (const auto& p : ps) {
    ids.push_back(p["input_ids"].get<std::vector<int32_t>>());
    const int cap = static_cast<int>(ids.back().size()) + kNew;
    eg::KVCache ref(m->config(), options(eg::KVType::F32, 16, cap));
    want.push_back(greedy(*m, ref, ids.back()));
    kvs.emplace_back(m->config(), options(eg::KVType::F16, 16, cap));
    // Prefill only 3 tokens, so that the overflow (if any) can come in the batched steps.
    m->forward(ids.back().data(), 3, kvs.back(), s, eg::LogitsMode::Last, logits);
  }
  // Feed the rest of each prompt, then the generated ids, one token per step for both at once.
  std::vector<size_t> fed = {3, 3};
  while (got[0].size() < kNew || got[1].size() < kNew) {
    std::vector<int32_t> toks;
    std::vector<eg::KVCache*> batch;
    std::vector<int> who;
    for (int b = 0; b < 2; ++b) {
      if (got[b].size() >= kNew) continue;
      toks.push_back(fed[b] < ids[b].size() ? ids[b][fed[b]] : got[b].back());
      batch.push_back(&kvs[b]);
      who.push_back(b);
    }
    m->forward_batch(toks.data(), static_cast<int>(toks.size()), batch.data(), s, logits);
    for (size_t i = 0; i < who.size(); ++i) {
      const int b = who[i];
      if (fed[b] < ids[b].size()) ++fed[b];
      if (fed[b] == ids[b].size())  // the logits of the last prompt token or of a generated one
        got[b].push_back(eg::argmax(logits.data() + i * m->config().vocab_size, m->config().vocab_size));
    }
  }
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(got[b], want[b]) << ps[b]["id"];
    EXPECT_EQ(kvs[b].layer_type(kLayer), eg::KVType::BF16);
  }
}

TEST(KVOverflowModel, RunWarnsOnceAndPrintsTheF32Text) {
  const json p = prompts()[0];
  for (const char* kv : {"f16", "f32"}) {
    const auto r = egtest::run_cmd({egtest::cli_path(), "run", "-m", scaled_dir(), "-p", p["text"].get<std::string>(),
                                    "-n", "40", "--ignore-eos", "--json", "--kv-type", kv});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["generated_ids"], p["greedy_new_ids"]) << kv;
    EXPECT_EQ(j["text"], p["greedy_text"]) << kv;
    size_t lines = 0;
    for (size_t at = r.err.find("edgegemma: warning: "); at != std::string::npos;
         at = r.err.find("edgegemma: warning: ", at + 1))
      ++lines;
    EXPECT_EQ(lines, std::string(kv) == "f16" ? 1u : 0u) << r.err;
    if (std::string(kv) == "f16") EXPECT_NE(r.err.find("bf16"), std::string::npos) << r.err;
  }
}

}  // namespace
