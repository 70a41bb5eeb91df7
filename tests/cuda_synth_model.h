// A synthetic Gemma model built in memory (no files) for the CUDA tests and bench/cuda: a known
// config (model/known_models.h), optionally with keys overridden (smaller shapes), and random
// weights in the layout `edgegemma quantize --type q4_0` writes: matrices Q4_0 (or `matrix_type`),
// embedding Q8_0, norms f32. Header-only; the weights are deterministic in `seed`.
//
// Gemma 4 (gemma-4-e2b, gemma-4-e4b, gemma-4-31b; MoE models are refused) follows the tensors
// model/weights.cpp binds: no k_proj / v_proj / k_norm on KV-shared layers (LayerConfig::kv_source
// >= 0), no v_proj on K=V layers, a layer_scalar [1] per layer, and with per-layer embeddings
// (ple_dim > 0) the table embed_tokens_per_layer [ple_vocab, L·P] (Q8_0), per_layer_model_projection
// [L·P, H] (F32, as llama.cpp's quantizer and ours keep it), per_layer_projection_norm [P] and per
// layer per_layer_input_gate [P, H], per_layer_projection [H, P] (matrix_type) and
// post_per_layer_input_norm [H]. Gemma 4 norms are plain-scale (y = x̂·w), so their weights are
// uniform in [0.9, 1.1) (Gemma 2/3: the stored w of 1 + w, uniform in ±0.1); layer_scalar is
// uniform in [0.5, 1). With hidden_size_per_layer_input null (ple_dim −1, resolved from the
// tensors) no PLE tensors are made and the model resolves ple_dim to 0.
//
// Overrides for Gemma 4: a num_hidden_layers override without layer_types first cuts the known
// config to that many layers as `--layers` does (known_models.h truncate_layers: the first layer
// types, the last layer full, num_kv_shared_layers reduced by the layers cut), then the overrides
// apply (so they may set num_kv_shared_layers or layer_types themselves); a vocab_size override
// without vocab_size_per_layer_input sets the PLE vocabulary to the same size. Gemma 2/3 models
// are byte-identical to what this header made before Gemma 4 (same tensors, same random stream),
// except Q8_0/F16/BF16 layer matrices, drawn like Q4_0 ones since 2026-12-07 (random_tensor's
// like_q4).
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"
#include "model/known_models.h"
#include "model/model.h"

namespace eg::synth {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24); }  // [0, 1)
};

// Random blocks of a quantized type (scale d in [lo, hi)), or values in [-hi, hi) for F32/F16/BF16.
// Q8_0 codes are uniform bytes, or with `like_q4` (the layer matrices; F16/BF16 below) a Q4_0
// code times 16 plus a finer step: c = clamp(16·(a − 8) + (b − 8), ±127) for random nibbles a, b, and scale d/16, so
// that a Q8_0 matrix is the same random function as a Q4_0 one (same spread, same slightly
// negative mean, −d/2). Uniform bytes (mean 0) made the synthetic E2B chaotic: on the CPU alone
// an f16 instead of an f32 KV cache changed 9 of 9 greedy ids (2026-12-07).
inline std::shared_ptr<std::vector<uint8_t>> random_tensor(Rng& g, DType t, int64_t rows, int64_t cols, float lo, float hi,
                                                           bool like_q4 = false) {
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows) * dtype_row_bytes(t, cols));
  uint8_t* p = buf->data();
  const size_t n = buf->size();
  if (t == DType::Q4_0 || t == DType::Q8_0) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t r = g.next();
      std::memcpy(p + i, &r, 8);
    }
    const bool remap = t == DType::Q8_0 && like_q4;
    if (remap) {
      for (size_t i = 0; i < n; ++i) {
        const int c = 16 * ((p[i] >> 4) - 8) + ((p[i] & 15) - 8);
        p[i] = static_cast<uint8_t>(static_cast<int8_t>(c < -127 ? -127 : c));
      }
    }
    const size_t bb = t == DType::Q4_0 ? 18 : 34;
    const float unit = remap ? 1.0f / 16.0f : 1.0f;
    for (size_t b = 0; b < n / bb; ++b) {
      const uint16_t d = f32_to_f16(unit * (lo + (hi - lo) * g.uniform()));
      std::memcpy(p + b * bb, &d, 2);
    }
  } else if (t == DType::Q6_K) {
    // Random ql / qh / int8 sub-block scales; the f16 super-block scale d (bytes 208..209 of
    // each 210-byte block) in [lo, hi).
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t r = g.next();
      std::memcpy(p + i, &r, 8);
    }
    constexpr size_t bb = 210;
    for (size_t b = 0; b < n / bb; ++b) {
      const uint16_t d = f32_to_f16(lo + (hi - lo) * g.uniform());
      std::memcpy(p + b * bb + 208, &d, 2);
    }
  } else {
    // Dense values: about the spread of a Q4_0 block of scale hi (uniform in ±8·hi·0.6); with
    // like_q4 (F16/BF16 layer matrices) the continuous form of a Q4_0 weight, d·x with d in
    // [lo, hi) and x uniform in [−8.5, 7.5) (mean −d/2; zero-mean matrices made E2B chaotic too).
    const float a = t == DType::F32 ? hi : 5.0f * hi;
    const size_t es = dtype_size(t);
    const bool dense_q4 = like_q4 && t != DType::F32;
    for (size_t i = 0; i < n / es; ++i) {
      const float v = dense_q4 ? (lo + (hi - lo) * g.uniform()) * (16.0f * g.uniform() - 8.5f)
                              : a * (2.0f * g.uniform() - 1.0f);
      if (t == DType::F32) std::memcpy(p + 4 * i, &v, 4);
      else {
        const uint16_t b = t == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(p + 2 * i, &b, 2);
      }
    }
  }
  return buf;
}

inline void add(TensorStore& st, Rng& g, const std::string& name, DType t, std::vector<int64_t> shape, float lo, float hi,
                bool like_q4 = false) {
  const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
  auto buf = random_tensor(g, t, rows, cols, lo, hi, like_q4);
  TensorInfo ti;
  ti.name = name;
  ti.dtype = t;
  ti.shape = std::move(shape);
  ti.data = buf->data();
  ti.nbytes = buf->size();
  st.add_external(std::move(ti), buf);
}

// F32 values uniform in [lo, hi) (Gemma 4's plain-scale norm weights and layer_scalar).
inline void add_uniform(TensorStore& st, Rng& g, const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
  const int64_t n = shape.size() == 2 ? shape[0] * shape[1] : shape.back();
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = lo + (hi - lo) * g.uniform();
    std::memcpy(buf->data() + 4 * i, &v, 4);
  }
  TensorInfo ti;
  ti.name = name;
  ti.dtype = DType::F32;
  ti.shape = std::move(shape);
  ti.data = buf->data();
  ti.nbytes = buf->size();
  st.add_external(std::move(ti), buf);
}

/// The model `name` (a known_model_config name) with `overrides` merged into its config JSON.
inline std::unique_ptr<Model> synth_model(const std::string& name, const nlohmann::json& overrides = nlohmann::json::object(),
                                          DType matrix_type = DType::Q4_0, uint64_t seed = 0x9E3779B97F4A7C15ull,
                                          DType embed_type = DType::Q8_0) {
  nlohmann::json cj = known_model_config(name);
  if (cj.contains("layer_types") && overrides.contains("num_hidden_layers") && !overrides.contains("layer_types"))
    cj = truncate_layers(cj, overrides["num_hidden_layers"].get<int>());
  if (cj.contains("vocab_size_per_layer_input") && overrides.contains("vocab_size") &&
      !overrides.contains("vocab_size_per_layer_input"))
    cj["vocab_size_per_layer_input"] = overrides["vocab_size"];
  cj.update(overrides);
  ModelConfig cfg = parse_hf_config(cj.dump(), known_model_generation_config(name).dump(), name);
  const bool g4 = cfg.family == ModelFamily::Gemma4;
  if (cfg.n_experts > 0) throw Error("synth_model: " + name + " has a mixture of experts, which it does not build");
  Rng g{seed};
  TensorStore st;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  // A norm weight [n]: the stored w of (1 + w) for Gemma 2/3, a plain scale around 1 for Gemma 4.
  auto norm = [&](const std::string& n, int64_t len) {
    if (g4) add_uniform(st, g, n, {len}, 0.9f, 1.1f);
    else add(st, g, n, DType::F32, {len}, 0.0f, 0.1f);
  };
  // Q8_0 (d·127 ≈ 0.06–0.13), or Q6_K (llama-quantize's choice for a hidden size that is a
  // multiple of 256) of about the same spread (d·|scale|·|q| ≲ 2.5e-5·128·32 ≈ 0.1).
  if (embed_type == DType::Q6_K) add(st, g, "model.embed_tokens.weight", DType::Q6_K, {V, H}, 1.2e-5f, 2.5e-5f);
  else add(st, g, "model.embed_tokens.weight", DType::Q8_0, {V, H}, 0.0005f, 0.001f);
  norm("model.norm.weight", H);
  const int64_t P = cfg.ple_dim > 0 ? cfg.ple_dim : 0, LP = static_cast<int64_t>(cfg.n_layers) * P;
  if (P > 0) {
    add(st, g, "model.embed_tokens_per_layer.weight", DType::Q8_0, {cfg.ple_vocab, LP}, 0.0005f, 0.001f);
    add(st, g, "model.per_layer_model_projection.weight", DType::F32, {LP, H}, 0.0f, 0.02f);
    norm("model.per_layer_projection_norm.weight", P);
  }
  const DType mt = matrix_type;
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& lc = cfg.layers[i];
    const std::string L = "model.layers." + std::to_string(i) + ".";
    const int64_t qd = static_cast<int64_t>(cfg.n_heads) * lc.head_dim, kvd = static_cast<int64_t>(lc.n_kv_heads) * lc.head_dim;
    const int64_t I = lc.intermediate_size;
    const bool own_kv = lc.kv_source < 0;
    add(st, g, L + "self_attn.q_proj.weight", mt, {qd, H}, 0.002f, 0.004f, true);
    if (own_kv) add(st, g, L + "self_attn.k_proj.weight", mt, {kvd, H}, 0.002f, 0.004f, true);
    if (own_kv && !lc.k_eq_v) add(st, g, L + "self_attn.v_proj.weight", mt, {kvd, H}, 0.002f, 0.004f, true);
    add(st, g, L + "self_attn.o_proj.weight", mt, {H, qd}, 0.002f, 0.004f, true);
    add(st, g, L + "mlp.gate_proj.weight", mt, {I, H}, 0.002f, 0.004f, true);
    add(st, g, L + "mlp.up_proj.weight", mt, {I, H}, 0.002f, 0.004f, true);
    add(st, g, L + "mlp.down_proj.weight", mt, {H, I}, 0.001f, 0.002f, true);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      norm(L + n + ".weight", H);
    if (cfg.qk_norm) {
      norm(L + "self_attn.q_norm.weight", lc.head_dim);
      if (own_kv) norm(L + "self_attn.k_norm.weight", lc.head_dim);
    }
    if (cfg.layer_scalar) add_uniform(st, g, L + "layer_scalar", {1}, 0.5f, 1.0f);
    if (P > 0) {
      add(st, g, L + "per_layer_input_gate.weight", mt, {P, H}, 0.002f, 0.004f, true);
      add(st, g, L + "per_layer_projection.weight", mt, {H, P}, 0.002f, 0.004f, true);
      norm(L + "post_per_layer_input_norm.weight", H);
    }
  }
  return std::make_unique<Model>(std::move(cfg), std::move(st));
}

}  // namespace eg::synth
