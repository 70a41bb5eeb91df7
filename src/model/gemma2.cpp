// Gemma 2 config loader (model_type gemma2). gemma-architectures.md §1; transformers
// configuration_gemma2.py: attention and final soft-capping, query_pre_attn_scalar, even layers
// sliding unless layer_types says otherwise, one RoPE θ for every layer, no q/k norm.
#include <cmath>

#include "model/config_parse.h"

namespace eg {

using namespace cfgparse;

void load_gemma2_config(const json& t, const std::string& origin, ModelConfig& c) {
  Fields f{t, origin};
  c.family = ModelFamily::Gemma2;
  fill_common(f, c, 256000, 4096);
  const int n_kv = f.get_int("num_key_value_heads", 4);
  const int head_dim = f.get_int("head_dim", 256);
  const int inter = f.get_int("intermediate_size", 9216);
  const double qpas = f.get_num("query_pre_attn_scalar", 256);
  if (!(qpas > 0)) f.fail("query_pre_attn_scalar must be > 0");
  c.query_scale = static_cast<float>(std::pow(qpas, -0.5));
  c.attn_softcap = static_cast<float>(f.get_num("attn_logit_softcapping", 0.0));
  c.norm_offset = 1.0f;
  c.qk_norm = false;
  if (n_kv <= 0 || head_dim <= 0 || inter <= 0) f.fail("sizes must be positive");
  if (c.n_heads % n_kv != 0) f.fail("num_attention_heads must be a multiple of num_key_value_heads");
  if (head_dim % 2 != 0) f.fail("head_dim must be even for RoPE");

  std::vector<LayerType> types;
  if (!parse_layer_types(f, c.n_layers, types)) {
    types.resize(c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) types[i] = (i % 2 == 0) ? LayerType::Sliding : LayerType::Full;
  }
  RopeSpec rope{static_cast<float>(f.get_num("rope_theta", 10000.0))};
  if (f.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention")))
      f.fail("per-layer-type rope_parameters are not expected in a Gemma 2 config");
    rope = parse_rope_dict(rp, origin, rope.theta);
  }
  if (rope.proportional) f.fail("proportional RoPE is a Gemma 4 feature");

  c.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[i];
    l.type = types[i];
    l.head_dim = head_dim;
    l.n_kv_heads = n_kv;
    l.intermediate_size = inter;
    apply_rope(rope, l);
  }
}

}  // namespace eg
