// Gemma 2 config loader (model_type gemma2). gemma-architectures.md §1; transformers
// configuration_gemma2.py: attention and final soft-capping, query_pre_attn_scalar, even layers
// sliding unless layer_types says otherwise, one RoPE θ for every layer, no q/k norm.
#include "model/config_parse.h"

namespace eg {

using namespace cfgparse;

void load_gemma2_config(const json& t, const std::string& origin, ModelConfig& c) {
  Fields f{t, origin};
  c.family = ModelFamily::Gemma2;
  fill_common(f, c, 256000, 4096);
  const UniformGeometry g = fill_gemma23_attention(f, c);
  c.qk_norm = false;

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

  fill_uniform_layers(c, g, types, rope, rope);  // one θ for every layer
}

}  // namespace eg
