// cuda_decode_bench: end-to-end decode speed of the CUDA executor on a synthetic gemma-3-1b in
// the layout `edgegemma quantize --type q4_0` writes (Q4_0 matrices, Q8_0 embedding since 1152
// is not a multiple of 256, f32 norms), built in memory with random blocks: no files, no CLI.
//
//   cuda_decode_bench [-p 512] [-n 128] [--model gemma-3-1b] [--check 8]
//
// Reports pp (prefill as a loop of decode steps), tg through prefill(&id, 1, Last) (what
// `edgegemma bench` times: the [V] logits come to the host) and tg through decode_argmax (only the
// id comes back), with and without programmatic dependent launch; then --check N steps of greedy
// decoding on the CPU executor and the GPU executor from the same prompt (ids and logit error).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"
#include "exec/executor.h"
#include "model/config.h"
#include "model/known_models.h"
#include "model/model.h"

using namespace eg;
using Clock = std::chrono::steady_clock;

namespace {

uint64_t g_state = 0x9E3779B97F4A7C15ull;
uint64_t next_u64() {
  g_state ^= g_state << 13;
  g_state ^= g_state >> 7;
  g_state ^= g_state << 17;
  return g_state;
}

// Random blocks of a quantized type (scale d in [lo, hi)), or f32 values in [-a, a).
std::shared_ptr<std::vector<uint8_t>> random_tensor(DType t, int64_t rows, int64_t cols, float lo, float hi) {
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows) * dtype_row_bytes(t, cols));
  uint8_t* p = buf->data();
  const size_t n = buf->size();
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = next_u64();
    std::memcpy(p + i, &r, 8);
  }
  if (t == DType::Q4_0 || t == DType::Q8_0) {
    const size_t bb = t == DType::Q4_0 ? 18 : 34;
    for (size_t b = 0; b < n / bb; ++b) {
      const float u = static_cast<float>(next_u64() >> 40) / static_cast<float>(1 << 24);
      const uint16_t d = f32_to_f16(lo + (hi - lo) * u);
      std::memcpy(p + b * bb, &d, 2);
    }
  } else if (t == DType::F32) {
    auto* f = reinterpret_cast<float*>(p);
    for (size_t i = 0; i < n / 4; ++i) f[i] = hi * (static_cast<float>(next_u64() >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }
  return buf;
}

void add(TensorStore& st, const std::string& name, DType t, std::vector<int64_t> shape, float lo, float hi) {
  const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
  auto buf = random_tensor(t, rows, cols, lo, hi);
  TensorInfo ti;
  ti.name = name;
  ti.dtype = t;
  ti.shape = std::move(shape);
  ti.data = buf->data();
  ti.nbytes = buf->size();
  st.add_external(std::move(ti), buf);
}

std::unique_ptr<Model> synth(const std::string& name) {
  const nlohmann::json cj = known_model_config(name);
  ModelConfig cfg = parse_hf_config(cj.dump(), known_model_generation_config(name).dump(), name);
  TensorStore st;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  add(st, "model.embed_tokens.weight", H % 256 == 0 ? DType::Q8_0 : DType::Q8_0, {V, H}, 0.0005f, 0.001f);
  add(st, "model.norm.weight", DType::F32, {H}, 0.0f, 0.1f);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& lc = cfg.layers[i];
    const std::string L = "model.layers." + std::to_string(i) + ".";
    const int64_t qd = static_cast<int64_t>(cfg.n_heads) * lc.head_dim, kvd = static_cast<int64_t>(lc.n_kv_heads) * lc.head_dim;
    const int64_t I = lc.intermediate_size;
    add(st, L + "self_attn.q_proj.weight", DType::Q4_0, {qd, H}, 0.002f, 0.004f);
    add(st, L + "self_attn.k_proj.weight", DType::Q4_0, {kvd, H}, 0.002f, 0.004f);
    add(st, L + "self_attn.v_proj.weight", DType::Q4_0, {kvd, H}, 0.002f, 0.004f);
    add(st, L + "self_attn.o_proj.weight", DType::Q4_0, {H, qd}, 0.002f, 0.004f);
    add(st, L + "mlp.gate_proj.weight", DType::Q4_0, {I, H}, 0.002f, 0.004f);
    add(st, L + "mlp.up_proj.weight", DType::Q4_0, {I, H}, 0.002f, 0.004f);
    add(st, L + "mlp.down_proj.weight", DType::Q4_0, {H, I}, 0.001f, 0.002f);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      add(st, L + n + ".weight", DType::F32, {H}, 0.0f, 0.1f);
    if (cfg.qk_norm) {
      add(st, L + "self_attn.q_norm.weight", DType::F32, {lc.head_dim}, 0.0f, 0.1f);
      add(st, L + "self_attn.k_norm.weight", DType::F32, {lc.head_dim}, 0.0f, 0.1f);
    }
  }
  return std::make_unique<Model>(std::move(cfg), std::move(st));
}

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void run(const StepExecutor& e, int n_prompt, int n_gen, bool pdl) {
  cuda::set_programmatic_launch(pdl);
  const int V = e.config().vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = n_prompt + n_gen;
  std::vector<int32_t> prompt(n_prompt), gen(n_gen);
  for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
  for (auto& t : gen) t = static_cast<int32_t>(next_u64() % V);
  std::vector<float> logits;
  for (int mode = 0; mode < 2; ++mode) {
    auto kv = e.new_kv_cache(ko);
    auto ws = e.new_workspace();
    e.prefill(prompt.data(), 1, *kv, *ws, LogitsMode::Last, logits);  // capture + warm-up
    kv->truncate(0);
    auto t0 = Clock::now();
    e.prefill(prompt.data(), n_prompt, *kv, *ws, LogitsMode::Last, logits);
    const double tp = secs(t0);
    t0 = Clock::now();
    KVCache* kp = kv.get();
    for (int i = 0; i < n_gen; ++i) {
      if (mode == 0) {
        e.prefill(&gen[i], 1, *kv, *ws, LogitsMode::Last, logits);
      } else {
        int32_t id;
        e.decode_argmax(&gen[i], 1, &kp, *ws, &id);
      }
    }
    const double tg = secs(t0);
    std::printf("pdl %-3s pp%d %8.1f tok/s | tg%d via %-22s %8.1f tok/s  %.3f ms/token\n", pdl ? "on" : "off",
                n_prompt, n_prompt / tp, n_gen, mode == 0 ? "prefill(Last, logits)" : "decode_argmax (id)",
                n_gen / tg, 1e3 * tg / n_gen);
  }
}

void check(const Model& m, const StepExecutor& gpu, int steps) {
  auto cpu = make_cpu_executor(m);
  const int V = m.config().vocab_size;
  KVCacheOptions ko;
  ko.max_tokens = 16 + steps + 1;
  auto kc = cpu->new_kv_cache(ko), kg = gpu.new_kv_cache(ko);
  auto wc = cpu->new_workspace(), wg = gpu.new_workspace();
  std::vector<int32_t> prompt(16);
  for (auto& t : prompt) t = static_cast<int32_t>(next_u64() % V);
  std::vector<float> lc, lg;
  cpu->prefill(prompt.data(), 16, *kc, *wc, LogitsMode::Last, lc);
  gpu.prefill(prompt.data(), 16, *kg, *wg, LogitsMode::Last, lg);
  int same = 0;
  float worst = 0.0f;
  for (int s = 0; s <= steps; ++s) {
    float e = 0.0f, scale = 1.0f;
    for (int v = 0; v < V; ++v) {
      e = std::max(e, std::fabs(lc[v] - lg[v]));
      scale = std::max(scale, std::fabs(lc[v]));
    }
    worst = std::max(worst, e / scale);
    const int32_t a = argmax_row(lc.data(), V), b = argmax_row(lg.data(), V);
    same += a == b;
    if (s == steps) break;
    cpu->prefill(&a, 1, *kc, *wc, LogitsMode::Last, lc);
    gpu.prefill(&a, 1, *kg, *wg, LogitsMode::Last, lg);
  }
  std::printf("check vs CPU (teacher-forced, %d steps): same greedy id %d/%d, max |dlogit| / max(1, max|logit|) = %.2e\n",
              steps + 1, same, steps + 1, worst);
}

}  // namespace

int main(int argc, char** argv) {
  int n_prompt = 512, n_gen = 128, n_check = 8;
  std::string name = "gemma-3-1b";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-p") n_prompt = std::atoi(argv[i + 1]);
    else if (a == "-n") n_gen = std::atoi(argv[i + 1]);
    else if (a == "--model") name = argv[i + 1];
    else if (a == "--check") n_check = std::atoi(argv[i + 1]);
  }
  try {
    if (!cuda::device_available()) {
      std::printf("no CUDA device\n");
      return 0;
    }
    auto t0 = Clock::now();
    auto m = synth(name);
    std::printf("synthetic %s (Q4_0, Q8_0 embedding): %.1f s to build\n", name.c_str(), secs(t0));
    t0 = Clock::now();
    auto e = make_executor(*m, parse_device("cuda"));
    std::printf("%s: weights uploaded in %.1f s\n", e->description().c_str(), secs(t0));
    run(*e, n_prompt, n_gen, false);
    run(*e, n_prompt, n_gen, true);
    if (n_check > 0) check(*m, *e, n_check);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "cuda_decode_bench: %s\n", ex.what());
    return 1;
  }
  return 0;
}
