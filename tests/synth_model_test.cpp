// The synthetic models of tests/cuda_synth_model.h (used by the CUDA tests and bench/cuda) on the
// CPU, so that a GPU-less machine checks what they build: the Gemma 4 tensors bind (Model's shape
// validation of every tensor model/weights.cpp expects: KV-shared layers without k/v, K=V layers
// without v_proj, PLE, layer_scalar) and the CPU executor runs them with finite, non-degenerate
// logits; MoE is refused; the Gemma 2/3 models are byte-identical to those the header built before
// it learnt Gemma 4 (digests recorded from that version, commit 7f07864).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_synth_model.h"
#include "exec/executor.h"
#include "model/model.h"

namespace eg {
namespace {

// FNV-1a over every tensor (name and bytes, in name order).
uint64_t digest(const Model& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  };
  const TensorStore& st = m.weights().store;
  for (const auto& n : st.names()) {
    const TensorInfo* t = st.find(n);
    mix(n.data(), n.size());
    mix(t->data, t->nbytes);
  }
  return h;
}

// The overrides of tests/cuda_prefill_test.cpp's small().
nlohmann::json small23(bool gemma2) {
  nlohmann::json o = {{"vocab_size", 4096}, {"hidden_size", 256}, {"intermediate_size", 512},
                      {"num_attention_heads", 4}, {"sliding_window", 48}, {"head_dim", 64},
                      {"query_pre_attn_scalar", 64}};
  if (gemma2) o.update({{"num_hidden_layers", 4}, {"num_key_value_heads", 2}});
  else o.update({{"num_hidden_layers", 6}, {"num_key_value_heads", 1}, {"head_dim", 128}, {"query_pre_attn_scalar", 128}});
  return o;
}

// A 4-layer gemma-4-e2b: sliding, full, then two KV-shared layers (2 reads 0, 3 reads 1) with the
// double-wide MLP, PLE of width 64, global head_dim 128 (proportional RoPE: 16 rotated pairs).
nlohmann::json small_e2b() {
  return {{"num_hidden_layers", 4},
          {"layer_types", {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}},
          {"num_kv_shared_layers", 2},
          {"vocab_size", 512},
          {"hidden_size", 256},
          {"intermediate_size", 256},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 1},
          {"head_dim", 64},
          {"global_head_dim", 128},
          {"hidden_size_per_layer_input", 64},
          {"sliding_window", 8}};
}

// Prefill of `prompt` (every row's logits) then `steps` greedy decode steps on the CPU executor;
// returns every logit produced.
std::vector<float> run_cpu(const Model& m, const std::vector<int32_t>& prompt, int steps) {
  auto e = make_cpu_executor(m);
  KVCacheOptions ko;
  ko.max_tokens = 32;
  auto kv = e->new_kv_cache(ko);
  auto ws = e->new_workspace();
  const int V = m.config().vocab_size;
  std::vector<float> all, lg;
  e->prefill(prompt.data(), static_cast<int>(prompt.size()), *kv, *ws, LogitsMode::All, lg);
  all.insert(all.end(), lg.begin(), lg.end());
  int32_t next = argmax_row(lg.data() + (prompt.size() - 1) * V, V);
  for (int s = 0; s < steps; ++s) {
    KVCache* kp = kv.get();
    e->decode(&next, 1, &kp, *ws, lg);
    all.insert(all.end(), lg.begin(), lg.end());
    next = argmax_row(lg.data(), V);
  }
  EXPECT_EQ(kv->n_past(), static_cast<int>(prompt.size()) + steps);
  return all;
}

// Every logit finite, and each row not constant (the random weights reach the output).
void expect_sane(const std::vector<float>& logits, int V, const char* what) {
  ASSERT_FALSE(logits.empty()) << what;
  ASSERT_EQ(logits.size() % V, 0u) << what;
  for (size_t r = 0; r < logits.size() / V; ++r) {
    float lo = logits[r * V], hi = lo;
    for (int v = 0; v < V; ++v) {
      const float x = logits[r * V + v];
      ASSERT_TRUE(std::isfinite(x)) << what << " row " << r << " id " << v;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_GT(hi - lo, 1e-3f) << what << " row " << r;
  }
}

TEST(SynthModel, Gemma4E2bBindsAndRunsOnTheCpu) {
  auto m = synth::synth_model("gemma-4-e2b", small_e2b());
  const ModelConfig& c = m->config();
  ASSERT_EQ(c.family, ModelFamily::Gemma4);
  ASSERT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.ple_dim, 64);
  EXPECT_EQ(c.ple_vocab, 512);  // follows the vocab_size override
  EXPECT_EQ(c.layers[2].kv_source, 0);
  EXPECT_EQ(c.layers[3].kv_source, 1);
  EXPECT_EQ(c.layers[3].head_dim, 128);
  EXPECT_EQ(c.layers[3].intermediate_size, 512);  // double-wide on the KV-shared layers
  const ModelWeights& w = m->weights();
  EXPECT_EQ(w.ple_model_proj.dtype, DType::F32);
  EXPECT_EQ(w.ple_embed.dtype, DType::Q8_0);
  EXPECT_NE(w.layers[0].v.data, nullptr);
  EXPECT_EQ(w.layers[2].k.data, nullptr);
  EXPECT_EQ(w.layers[3].v.data, nullptr);
  EXPECT_EQ(w.layers[3].k_norm.data, nullptr);
  for (const LayerWeights& lw : w.layers) {
    EXPECT_GE(lw.layer_scalar, 0.5f);
    EXPECT_LT(lw.layer_scalar, 1.0f);
  }
  const std::vector<float> a = run_cpu(*m, {2, 17, 300, 4, 511, 99, 7, 250, 3, 1}, 4);
  expect_sane(a, c.vocab_size, "gemma-4-e2b");
  // Deterministic in the seed; another seed gives other weights.
  EXPECT_EQ(digest(*m), digest(*synth::synth_model("gemma-4-e2b", small_e2b())));
  EXPECT_NE(digest(*m), digest(*synth::synth_model("gemma-4-e2b", small_e2b(), DType::Q4_0, 7)));
}

TEST(SynthModel, Gemma4LayerCutAndKEqVRunOnTheCpu) {
  // num_hidden_layers alone: the known config cut to 3 layers (s, s, full; no KV sharing left).
  auto e4b = synth::synth_model("gemma-4-e4b", {{"num_hidden_layers", 3}, {"vocab_size", 300}, {"hidden_size", 128},
                                                {"intermediate_size", 256}, {"num_attention_heads", 2},
                                                {"num_key_value_heads", 1}, {"head_dim", 64}, {"global_head_dim", 64},
                                                {"hidden_size_per_layer_input", 32}});
  ASSERT_EQ(e4b->config().n_layers, 3);
  EXPECT_EQ(e4b->config().layers[2].type, LayerType::Full);
  EXPECT_EQ(e4b->config().n_kv_layers(), 3);
  expect_sane(run_cpu(*e4b, {2, 5, 6, 7}, 2), 300, "gemma-4-e4b");
  // gemma-4-31b: K=V full layer (no v_proj), its own KV head count, no PLE.
  auto g31 = synth::synth_model("gemma-4-31b", {{"num_hidden_layers", 3}, {"vocab_size", 256}, {"hidden_size", 128},
                                                {"intermediate_size", 256}, {"num_attention_heads", 4},
                                                {"num_key_value_heads", 2}, {"num_global_key_value_heads", 1},
                                                {"head_dim", 32}, {"global_head_dim", 64}});
  ASSERT_TRUE(g31->config().layers[2].k_eq_v);
  EXPECT_EQ(g31->config().layers[2].n_kv_heads, 1);
  EXPECT_EQ(g31->config().ple_dim, 0);
  EXPECT_EQ(g31->weights().layers[2].v.data, nullptr);
  EXPECT_NE(g31->weights().layers[2].k.data, nullptr);
  expect_sane(run_cpu(*g31, {2, 100, 200, 50, 9}, 2), 256, "gemma-4-31b");
}

TEST(SynthModel, Gemma4MixtureOfExpertsIsRefused) {
  try {
    synth::synth_model("gemma-4-26b-a4b", {{"num_hidden_layers", 2}, {"vocab_size", 256}, {"hidden_size", 128}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mixture of experts"), std::string::npos) << e.what();
  }
}

// Gemma 2/3 synthetic models are unchanged (the CUDA tests' measured bounds were taken on them):
// the digests of the header as of commit 7f07864, except F16/BF16/Q8_0 matrices, drawn like Q4_0
// ones since 2026-12-07 (random_tensor's like_q4: the zero-mean ones made E2B chaotic).
TEST(SynthModel, Gemma23AreByteIdenticalToBefore) {
  EXPECT_EQ(digest(*synth::synth_model("gemma-3-1b", small23(false))), 0x5ad15d103bb29237ull);
  EXPECT_EQ(digest(*synth::synth_model("gemma-2-2b", small23(true))), 0x5eaf76bbf5a174a6ull);
  EXPECT_EQ(digest(*synth::synth_model("gemma-3-1b", small23(false), DType::F16)), 0x13958c24c327963cull);
  EXPECT_EQ(digest(*synth::synth_model("gemma-3-270m", {{"num_hidden_layers", 3}, {"vocab_size", 1024}})),
            0x5c090867214b1d9full);
  auto m = synth::synth_model("gemma-3-1b", small23(false));
  expect_sane(run_cpu(*m, {2, 818, 3000, 529}, 2), 4096, "gemma-3-1b");
}

}  // namespace
}  // namespace eg

namespace eg {
namespace {
// Every row of a LogitsMode::All prefill of a Gemma 4 model (PLE, KV sharing) is bit-identical to
// the LogitsMode::Last prefill of that prefix (the CPU reference the CUDA prefill tests compare
// every row against).
TEST(SynthModel, Gemma4AllRowsEqualTheLastRowOfEachPrefix) {
  const nlohmann::json o = {
      {"num_hidden_layers", 6},
      {"layer_types", {"sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                       "sliding_attention", "full_attention"}},
      {"num_kv_shared_layers", 2}, {"vocab_size", 4096}, {"hidden_size", 256}, {"intermediate_size", 512},
      {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"head_dim", 64}, {"global_head_dim", 128},
      {"hidden_size_per_layer_input", 64}, {"sliding_window", 48}};
  auto m = synth::synth_model("gemma-4-e2b", o, DType::F16);
  auto cpu = make_cpu_executor(*m);
  const int64_t V = m->config().vocab_size;
  std::vector<int32_t> p = {2, 818, 529, 3001, 563, 17, 900, 4000, 12};
  KVCacheOptions ko;
  ko.max_tokens = 64;
  std::vector<float> all, last;
  {
    auto kv = cpu->new_kv_cache(ko);
    auto ws = cpu->new_workspace();
    cpu->prefill(p.data(), 9, *kv, *ws, LogitsMode::All, all);
  }
  for (int t = 0; t < 9; ++t) {
    auto kv = cpu->new_kv_cache(ko);
    auto ws = cpu->new_workspace();
    cpu->prefill(p.data(), t + 1, *kv, *ws, LogitsMode::Last, last);
    float e = 0;
    for (int64_t i = 0; i < V; ++i) e = std::max(e, std::fabs(last[i] - all[t * V + i]));
    EXPECT_EQ(e, 0.0f) << "row " << t;
  }
}
}  // namespace
}  // namespace eg
