// Gemma 4 text config loader (model_type gemma4_text; the text_config of gemma4).
// gemma-architectures.md §3.1 (loader rule for per-layer head_dim / KV heads), §3.3.3 (RoPE per
// layer type, proportional on full layers), §3.3.4 (KV sharing), §3.3.5 (MoE);
// transformers configuration_gemma4.py / modeling_gemma4.py.
#include <cmath>

#include "model/config_parse.h"

namespace eg {

using namespace cfgparse;

void load_gemma4_config(const json& t, const std::string& origin, ModelConfig& c) {
  Fields f{t, origin};
  c.family = ModelFamily::Gemma4;
  fill_common(f, c, 262144, 512);
  c.max_position_embeddings = f.get_int("max_position_embeddings", 131072);
  c.norm_offset = 0.0f;  // plain-scale RMSNorm: y = x̂ · w
  c.query_scale = 1.0f;  // no 1/sqrt(d): q and k are RMS-normalised
  c.attn_softcap = 0.0f;
  c.qk_norm = true;
  c.v_norm = true;
  c.layer_scalar = true;
  const int L = c.n_layers;
  const int n_kv = f.get_int("num_key_value_heads", 4);
  const int head_dim = f.get_int("head_dim", 256);
  const int inter = f.get_int("intermediate_size", 9216);
  const bool k_eq_v = f.get_bool("attention_k_eq_v", false);
  if (n_kv <= 0 || head_dim <= 0 || inter <= 0) f.fail("sizes must be positive");

  // Layer types; the last layer is always full (transformers overwrites an explicit list too).
  std::vector<LayerType> types;
  if (!parse_layer_types(f, L, types)) {
    types.resize(L);
    for (int i = 0; i < L; ++i) types[i] = ((i + 1) % 6 == 0) ? LayerType::Full : LayerType::Sliding;
  }
  types[L - 1] = LayerType::Full;

  // RoPE per layer type.
  RopeSpec full{1000000.0f}, local{10000.0f};
  full.proportional = true;
  full.partial_rotary_factor = 0.25f;
  if (f.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object() || !(rp.contains("full_attention") || rp.contains("sliding_attention")))
      f.fail("rope_parameters must map layer types (full_attention, sliding_attention) to parameters");
    if (rp.contains("full_attention")) full = parse_rope_dict(rp["full_attention"], origin, 1e6f);
    if (rp.contains("sliding_attention")) local = parse_rope_dict(rp["sliding_attention"], origin, 1e4f);
  } else {
    if (f.has("rope_theta")) full.theta = static_cast<float>(f.get_num("rope_theta", 1e6));
    if (f.has("rope_local_base_freq")) local.theta = static_cast<float>(f.get_num("rope_local_base_freq", 1e4));
  }

  // Per-layer head_dim / KV heads: per_layer_config (transformers >= 5.15 exports) when present,
  // else the flat keys global_head_dim / num_global_key_value_heads (the latter only with K=V).
  std::vector<int> hd(L, head_dim), kvh(L, n_kv);
  if (f.has("per_layer_config")) {
    const json& plc = t["per_layer_config"];
    if (!plc.is_object()) f.fail("per_layer_config must be an object");
    for (const auto& [key, val] : plc.items()) {
      int idx = -1;
      try {
        size_t used = 0;
        idx = std::stoi(key, &used);
        if (used != key.size()) idx = -1;
      } catch (...) {
        idx = -1;
      }
      if (idx < 0 || idx >= L) f.fail("per_layer_config key '" + key + "' is not a layer index");
      if (!val.is_object()) f.fail("per_layer_config['" + key + "'] must be an object");
      Fields lf{val, origin};
      hd[idx] = lf.get_int("head_dim", head_dim);
      kvh[idx] = lf.get_int("num_key_value_heads", n_kv);
    }
  } else {
    const int global_hd = f.get_int("global_head_dim", 512);
    const int global_kv = (k_eq_v && f.has("num_global_key_value_heads"))
                              ? f.get_int("num_global_key_value_heads") : n_kv;
    for (int i = 0; i < L; ++i)
      if (types[i] == LayerType::Full) {
        hd[i] = global_hd;
        kvh[i] = global_kv;
      }
  }

  // KV sharing: the last num_kv_shared_layers layers read the K/V of the last earlier non-shared
  // layer of the same type.
  const int n_shared = f.get_int("num_kv_shared_layers", 0);
  if (n_shared >= L) f.fail("num_kv_shared_layers must be smaller than num_hidden_layers");
  const int first_shared = L - n_shared;
  const bool double_wide = f.get_bool("use_double_wide_mlp", false);

  c.layers.resize(L);
  for (int i = 0; i < L; ++i) {
    LayerConfig& l = c.layers[i];
    l.type = types[i];
    l.head_dim = hd[i];
    l.n_kv_heads = kvh[i];
    if (l.head_dim <= 0 || l.head_dim % 2 || l.n_kv_heads <= 0 || c.n_heads % l.n_kv_heads)
      f.fail("layer " + std::to_string(i) + ": bad head_dim / num_key_value_heads");
    l.k_eq_v = k_eq_v && l.type == LayerType::Full;
    l.intermediate_size = inter;
    apply_rope(l.type == LayerType::Full ? full : local, l);
    if (i >= first_shared) {
      if (const std::string e = assign_kv_source(c, l, i, first_shared, types); !e.empty()) f.fail(e);
      if (double_wide) l.intermediate_size = 2 * inter;
    }
  }

  // Per-layer embeddings: -1 = key absent, resolved from the tensors.
  c.ple_dim = f.has("hidden_size_per_layer_input") ? f.get_int("hidden_size_per_layer_input") : -1;
  c.ple_vocab = f.get_int("vocab_size_per_layer_input", c.vocab_size);

  if (f.get_bool("enable_moe_block", false)) {
    c.n_experts = f.get_int("num_experts");
    c.top_k_experts = f.get_int("top_k_experts");
    c.moe_intermediate_size = f.get_int("moe_intermediate_size");
    if (c.n_experts <= 0 || c.top_k_experts <= 0 || c.top_k_experts > c.n_experts || c.moe_intermediate_size <= 0)
      f.fail("MoE needs num_experts >= top_k_experts > 0 and moe_intermediate_size > 0");
  }
}

}  // namespace eg
