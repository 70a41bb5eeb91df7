// KV cache benchmarks and report numbers (docs/performance.md "KV cache"):
//   BM_PagedAttentionDecode/<type>/<ctx>  one decode query against ctx cached positions per
//                                         storage type (gemma-3-1b head shapes), KV bytes/s read
//   BM_PagedAttentionPrefill/<T>          T causal queries at positions 0..T-1 against themselves
//                                         (F16 KV, gemma-3-1b head shapes: 4 heads, 1 kv head, 256),
//                                         MAC/s of q·K plus p·V counted over the visible keys
//   BM_KVWrite/<type>/<T>                 KVCache::write of T positions (gemma-3-1b K/V shape: 1 kv
//                                         head x 256) into a prepared page: the cost of converting
//                                         (and range-checking) K/V into the storage type
//   BM_KVBytesPer1000Tokens/<model>/<type> kv_bytes_for_context(cfg, 1000) as a counter (no timing)
//   BM_KVTypeQuality/<type>               tiny-gemma3: perplexity of the first 4096 tokens of
//                                         valid.txt (BOS + text, one sequence, 4095 predictions)
//                                         and greedy agreement with F32 KV on the 8 reference
//                                         prompts (40 tokens each), as counters
// Run: build/bench/kv_bench --benchmark_filter=... (the quality one takes a while on 2 cores).
#include <benchmark/benchmark.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "engine/loaded_model.h"
#include "engine/perplexity.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/paged_attention.h"
#include "model/known_models.h"

namespace {

const eg::KVType kTypes[] = {eg::KVType::F16, eg::KVType::BF16, eg::KVType::F32, eg::KVType::INT8};

void BM_PagedAttentionDecode(benchmark::State& st) {
  const eg::KVType type = kTypes[st.range(0)];
  const int n = static_cast<int>(st.range(1)), H = 4, KVH = 1, D = 256;
  eg::ModelConfig c;
  c.n_layers = 1;
  eg::LayerConfig l;
  l.n_kv_heads = KVH;
  l.head_dim = D;
  c.layers.push_back(l);
  eg::KVCacheOptions o;
  o.type = type;
  o.max_tokens = n;
  eg::KVCache kv(c, o);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(o.page_tokens) * KVH * D), v(k.size());
  for (int p = 0; p < n; p += o.page_tokens) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    const int T = std::min(o.page_tokens, n - p);
    kv.begin_append(p, T);
    kv.write(0, p, T, k.data(), v.data());
    kv.commit(p + T);
  }
  std::vector<float> q(H * D, 0.1f), out(H * D);
  const int32_t pos = n - 1;
  const eg::ops::AttentionParams p{H, KVH, D, 0.0625f, 0.0f, 0};
  for (auto _ : st) {
    eg::kv::paged_attention(q.data(), 1, &pos, kv.view(0), p, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.SetLabel(eg::kv_type_name(type));
  st.counters["kv_bytes/s"] =
      benchmark::Counter(static_cast<double>(n) * kv.bytes_per_token(0), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedAttentionDecode)->ArgsProduct({{0, 1, 2, 3}, {512, 4096}})->UseRealTime();

void BM_PagedAttentionPrefill(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), H = 4, KVH = 1, D = 256;
  eg::ModelConfig c;
  c.n_layers = 1;
  eg::LayerConfig l;
  l.n_kv_heads = KVH;
  l.head_dim = D;
  c.layers.push_back(l);
  eg::KVCacheOptions o;
  o.type = eg::KVType::F16;
  o.max_tokens = n;
  o.page_tokens = n;
  eg::KVCache kv(c, o);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(n) * KVH * D), v(k.size()), q(static_cast<size_t>(n) * H * D);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  kv.begin_append(0, n);
  kv.write(0, 0, n, k.data(), v.data());
  kv.commit(n);
  std::vector<float> out(q.size());
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  const eg::ops::AttentionParams p{H, KVH, D, 0.0625f, 0.0f, 0};
  for (auto _ : st) {
    eg::kv::paged_attention(q.data(), n, pos.data(), kv.view(0), p, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double visible = 0.5 * n * (n + 1.0);  // causal: query t sees t + 1 keys
  st.counters["MAC/s"] = benchmark::Counter(2.0 * visible * H * D, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedAttentionPrefill)->Arg(512)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_KVWrite(benchmark::State& st) {
  const eg::KVType type = kTypes[st.range(0)];
  const int T = static_cast<int>(st.range(1)), KVH = 1, D = 256;
  eg::ModelConfig c;
  c.n_layers = 1;
  eg::LayerConfig l;
  l.n_kv_heads = KVH;
  l.head_dim = D;
  c.layers.push_back(l);
  eg::KVCacheOptions o;
  o.type = type;
  o.max_tokens = o.page_tokens;
  eg::KVCache kv(c, o);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(T) * KVH * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  kv.begin_append(0, o.page_tokens);
  for (auto _ : st) {
    kv.write(0, 0, T, k.data(), v.data());
    benchmark::ClobberMemory();
  }
  st.SetLabel(eg::kv_type_name(type));
  st.counters["values/s"] = benchmark::Counter(2.0 * k.size(), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_KVWrite)->ArgsProduct({{0, 1, 2, 3}, {1, 128}});

std::string shared() { return EG_SHARED_DIR; }

void BM_KVBytesPer1000Tokens(benchmark::State& st) {
  static const char* names[] = {"tiny-gemma3", "gemma-3-1b", "gemma-4-e2b"};
  const std::string name = names[st.range(0)];
  eg::ModelConfig cfg = name == "tiny-gemma3"
                            ? eg::load_hf_config(shared() + "/models/tiny-gemma3")
                            : eg::parse_hf_config(eg::known_model_config(name).dump(),
                                                  eg::known_model_generation_config(name).dump(), name);
  eg::KVCacheOptions o;
  o.type = kTypes[st.range(1)];
  size_t bytes = 0;
  for (auto _ : st) benchmark::DoNotOptimize(bytes = eg::kv_bytes_for_context(cfg, 1000, o));
  st.SetLabel(name + " " + eg::kv_type_name(o.type));
  st.counters["KiB_per_1000_tokens"] = static_cast<double>(bytes) / 1024.0;
  st.counters["KiB_at_8192"] = static_cast<double>(eg::kv_bytes_for_context(cfg, 8192, o)) / 1024.0;
  st.counters["KiB_at_32768"] = static_cast<double>(eg::kv_bytes_for_context(cfg, 32768, o)) / 1024.0;
}
BENCHMARK(BM_KVBytesPer1000Tokens)->ArgsProduct({{0, 1, 2}, {0, 3}})->Iterations(1);

void BM_KVTypeQuality(benchmark::State& st) {
  const eg::KVType type = kTypes[st.range(0)];
  const std::string dir = shared() + "/models/tiny-gemma3";
  static auto lm = eg::LoadedModel::load_dir(dir);
  const eg::Model& m = lm->model();
  const int V = m.config().vocab_size;
  std::ifstream f(shared() + "/data/corpus/valid.txt", std::ios::binary);
  std::string text(200000, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  auto ids = lm->tokenizer().encode(text, true, false);
  ids.resize(4096);
  const auto ref = nlohmann::json::parse(std::ifstream(dir + "/reference.json"));
  double ppl = 0;
  int agree = 0, total = 0, prefix = 0;
  for (auto _ : st) {
    eg::KVCacheOptions o;
    o.type = type;
    o.max_tokens = 4096;
    eg::KVCache kv(m.config(), o);
    eg::ForwardScratch s;
    std::vector<float> logits;
    double nll = 0;
    for (int p = 0; p < 4096; p += 256) {
      m.forward(ids.data() + p, 256, kv, s, eg::LogitsMode::All, logits);
      for (int t = 0; t < 256 && p + t + 1 < 4096; ++t) nll += eg::token_nll(logits.data() + static_cast<size_t>(t) * V, V, ids[p + t + 1]);
    }
    ppl = std::exp(nll / 4095);
    agree = total = prefix = 0;
    for (const auto& pr : ref["prompts"]) {
      const auto in = pr["input_ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> gen[2];
      for (int pass = 0; pass < 2; ++pass) {
        eg::KVCacheOptions oo;
        oo.type = pass == 0 ? eg::KVType::F32 : type;
        oo.max_tokens = static_cast<int>(in.size()) + 40;
        eg::KVCache c(m.config(), oo);
        m.forward(in.data(), static_cast<int>(in.size()), c, s, eg::LogitsMode::Last, logits);
        for (int i = 0; i < 40; ++i) {
          const int32_t next = eg::argmax(logits.data(), V);
          gen[pass].push_back(next);
          if (i + 1 < 40) m.forward(&next, 1, c, s, eg::LogitsMode::Last, logits);
        }
      }
      int i = 0;
      while (i < 40 && gen[0][i] == gen[1][i]) ++i;
      prefix += i;
      for (int j = 0; j < 40; ++j) agree += gen[0][j] == gen[1][j];
      total += 40;
    }
  }
  st.SetLabel(eg::kv_type_name(type));
  st.counters["ppl_4096"] = ppl;
  st.counters["greedy_same_position"] = static_cast<double>(agree) / total;
  st.counters["greedy_common_prefix"] = static_cast<double>(prefix) / total;
}
BENCHMARK(BM_KVTypeQuality)->DenseRange(0, 3)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
