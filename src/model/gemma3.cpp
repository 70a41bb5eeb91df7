// Gemma 3 config loader (model_type gemma3_text; the text part of gemma3).
// gemma-architectures.md §2; transformers configuration_gemma3.py.
#include "model/config_parse.h"

namespace eg {

using namespace cfgparse;

void load_gemma3_config(const json& t, const std::string& origin, ModelConfig& c) {
  Fields f{t, origin};
  c.family = ModelFamily::Gemma3;
  c.max_position_embeddings = 131072;
  fill_common(f, c, 262208, 4096);
  c.max_position_embeddings = f.get_int("max_position_embeddings", 131072);
  const UniformGeometry g = fill_gemma23_attention(f, c);
  c.qk_norm = true;
  c.bidirectional = f.get_bool("use_bidirectional_attention", false);

  // Layer types: explicit list (transformers 5) or the sliding pattern (Hub layout): layer i is
  // full iff (i+1) % pattern == 0; the last layer is not forced to full.
  std::vector<LayerType> types;
  if (!parse_layer_types(f, c.n_layers, types)) {
    int pattern = 6;
    if (f.has("sliding_window_pattern")) pattern = f.get_int("sliding_window_pattern");
    else if (f.has("_sliding_window_pattern")) pattern = f.get_int("_sliding_window_pattern");
    if (pattern <= 0) f.fail("sliding_window_pattern must be > 0");
    types.resize(c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) types[i] = ((i + 1) % pattern == 0) ? LayerType::Full : LayerType::Sliding;
  }

  // RoPE: rope_parameters per layer type (v5) or rope_theta/rope_local_base_freq/rope_scaling.
  RopeSpec full{1000000.0f}, local{10000.0f};
  if (f.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object()) f.fail("rope_parameters must be an object");
    if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
      if (rp.contains("full_attention")) full = parse_rope_dict(rp["full_attention"], origin, 1e6f);
      if (rp.contains("sliding_attention")) local = parse_rope_dict(rp["sliding_attention"], origin, 1e4f);
    } else {
      full = parse_rope_dict(rp, origin, 1e6f);
      local.theta = static_cast<float>(f.get_num("rope_local_base_freq", 10000.0));
    }
  } else {
    full.theta = static_cast<float>(f.get_num("rope_theta", 1000000.0));
    local.theta = static_cast<float>(f.get_num("rope_local_base_freq", 10000.0));
    if (f.has("rope_scaling")) full = parse_rope_dict(t["rope_scaling"], origin, full.theta);
  }
  if (!(full.theta > 0) || !(local.theta > 0)) f.fail("rope theta must be > 0");
  if (full.proportional || local.proportional) f.fail("proportional RoPE is a Gemma 4 feature");

  fill_uniform_layers(c, g, types, full, local);
}

}  // namespace eg
