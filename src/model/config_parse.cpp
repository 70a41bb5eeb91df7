#include "model/config_parse.h"

#include <cmath>

#include "core/error.h"

namespace eg::cfgparse {

void Fields::fail(const std::string& msg) const { throw Error(origin + ": " + msg); }

int Fields::get_int(const char* k) const {
  if (!has(k)) fail(std::string("missing required field '") + k + "'");
  return get_int(k, 0);
}

int Fields::get_int(const char* k, int def) const {
  if (!has(k)) return def;
  const json& v = j.at(k);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1LL << 31) - 1)
    fail(std::string("field '") + k + "' must be a non-negative integer");
  return static_cast<int>(v.get<int64_t>());
}

double Fields::get_num(const char* k, double def) const {
  if (!has(k)) return def;
  if (!j.at(k).is_number()) fail(std::string("field '") + k + "' must be a number");
  return j.at(k).get<double>();
}

bool Fields::get_bool(const char* k, bool def) const {
  if (!has(k)) return def;
  if (!j.at(k).is_boolean()) fail(std::string("field '") + k + "' must be true or false");
  return j.at(k).get<bool>();
}

RopeSpec parse_rope_dict(const json& d, const std::string& origin, float default_theta) {
  RopeSpec r;
  r.theta = default_theta;
  if (!d.is_object()) throw Error(origin + ": rope parameters must be an object");
  if (d.contains("rope_theta") && d["rope_theta"].is_number()) r.theta = d["rope_theta"].get<float>();
  std::string type = "default";
  if (d.contains("rope_type") && d["rope_type"].is_string()) type = d["rope_type"];
  else if (d.contains("type") && d["type"].is_string()) type = d["type"];
  if (type == "linear") {
    if (!d.contains("factor") || !d["factor"].is_number())
      throw Error(origin + ": linear rope scaling needs a numeric 'factor'");
    r.linear_factor = d["factor"].get<float>();
    if (!(r.linear_factor > 0)) throw Error(origin + ": rope scaling factor must be > 0");
  } else if (type == "proportional") {
    r.proportional = true;
    if (d.contains("partial_rotary_factor") && d["partial_rotary_factor"].is_number())
      r.partial_rotary_factor = d["partial_rotary_factor"].get<float>();
    if (!(r.partial_rotary_factor > 0 && r.partial_rotary_factor <= 1))
      throw Error(origin + ": partial_rotary_factor must be in (0, 1]");
  } else if (type != "default") {
    throw Error(origin + ": unsupported rope_type '" + type +
                "' (supported: default, linear, proportional)");
  }
  if (!(r.theta > 0)) throw Error(origin + ": rope_theta must be > 0");
  return r;
}

void add_eos_ids(const json& v, std::vector<int>& out) {
  auto add = [&](int id) {
    for (int e : out)
      if (e == id) return;
    out.push_back(id);
  };
  if (v.is_number_integer()) add(v.get<int>());
  else if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) add(e.get<int>());
}

bool parse_layer_types(const Fields& f, int n, std::vector<LayerType>& out) {
  if (!f.has("layer_types")) return false;
  const json& lt = f.j["layer_types"];
  if (!lt.is_array() || static_cast<int>(lt.size()) != n)
    f.fail("layer_types must be a list of num_hidden_layers entries");
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    if (lt[i] == "sliding_attention") out[i] = LayerType::Sliding;
    else if (lt[i] == "full_attention") out[i] = LayerType::Full;
    else f.fail("unknown layer type in layer_types[" + std::to_string(i) + "]");
  }
  return true;
}

void fill_common(const Fields& f, ModelConfig& c, int default_vocab, int default_window) {
  const json& t = f.j;
  c.vocab_size = f.get_int("vocab_size", default_vocab);
  c.hidden_size = f.get_int("hidden_size", 2304);
  c.n_layers = f.get_int("num_hidden_layers", 26);
  c.n_heads = f.get_int("num_attention_heads", 8);
  c.sliding_window = f.get_int("sliding_window", default_window);
  c.max_position_embeddings = f.get_int("max_position_embeddings", 8192);
  c.rms_norm_eps = static_cast<float>(f.get_num("rms_norm_eps", 1e-6));
  c.final_softcap = static_cast<float>(f.get_num("final_logit_softcapping", 0.0));
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", true);
  if (t.contains("hidden_activation") && t["hidden_activation"].is_string() &&
      t["hidden_activation"] != "gelu_pytorch_tanh")
    f.fail("unsupported hidden_activation '" + t["hidden_activation"].get<std::string>() + "'");
  // Gemma 3 reads it itself (EmbeddingGemma: ModelConfig::bidirectional); elsewhere it is unknown.
  if (c.family != ModelFamily::Gemma3 && t.contains("use_bidirectional_attention") &&
      t["use_bidirectional_attention"].is_boolean() && t["use_bidirectional_attention"].get<bool>())
    f.fail("use_bidirectional_attention=true is supported for Gemma 3 (EmbeddingGemma) only");
  if (t.contains("use_bidirectional_attention") && t["use_bidirectional_attention"].is_string() &&
      t["use_bidirectional_attention"] == "all")
    f.fail("use_bidirectional_attention='all' (an encoder) is not supported");
  if (c.family == ModelFamily::Gemma4 && t.contains("use_bidirectional_attention") &&
      t["use_bidirectional_attention"].is_string() && t["use_bidirectional_attention"] == "vision")
    c.image_blocks_sliding_only = true;
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.n_layers <= 0 || c.n_heads <= 0)
    f.fail("sizes must be positive");
  if (c.n_layers > 4096 || c.hidden_size > (1 << 20)) f.fail("implausible model size");
  c.bos_token_id = f.get_int("bos_token_id", 2);
  c.pad_token_id = f.get_int("pad_token_id", 0);
  if (t.contains("eos_token_id")) add_eos_ids(t["eos_token_id"], c.eos_token_ids);
}

UniformGeometry fill_gemma23_attention(const Fields& f, ModelConfig& c) {
  UniformGeometry g;
  g.n_kv = f.get_int("num_key_value_heads", 4);
  g.head_dim = f.get_int("head_dim", 256);
  g.intermediate = f.get_int("intermediate_size", 9216);
  const double qpas = f.get_num("query_pre_attn_scalar", 256);
  if (!(qpas > 0)) f.fail("query_pre_attn_scalar must be > 0");
  c.query_scale = static_cast<float>(std::pow(qpas, -0.5));
  c.attn_softcap = static_cast<float>(f.get_num("attn_logit_softcapping", 0.0));
  c.norm_offset = 1.0f;
  if (g.n_kv <= 0 || g.head_dim <= 0 || g.intermediate <= 0) f.fail("sizes must be positive");
  if (c.n_heads % g.n_kv != 0) f.fail("num_attention_heads must be a multiple of num_key_value_heads");
  if (g.head_dim % 2 != 0) f.fail("head_dim must be even for RoPE");
  return g;
}

void fill_uniform_layers(ModelConfig& c, const UniformGeometry& g, const std::vector<LayerType>& types,
                         const RopeSpec& full, const RopeSpec& sliding) {
  c.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[i];
    l.type = types[i];
    l.head_dim = g.head_dim;
    l.n_kv_heads = g.n_kv;
    l.intermediate_size = g.intermediate;
    apply_rope(types[i] == LayerType::Full ? full : sliding, l);
  }
}

void apply_rope(const RopeSpec& r, LayerConfig& l) {
  l.rope_theta = r.theta;
  l.rope_linear_factor = r.linear_factor;
  l.rope_dims = l.head_dim;
  // Proportional (Gemma 4 full layers): the first int(f·d/2) pairs rotate with frequencies
  // θ^(-2i/d) over the FULL head dim d; the remaining pairs get frequency 0 (identity).
  l.rope_pairs = r.proportional ? static_cast<int>(r.partial_rotary_factor * l.head_dim / 2) : l.head_dim / 2;
}

std::string assign_kv_source(const ModelConfig& c, LayerConfig& l, int i, int first_shared,
                             const std::vector<LayerType>& types) {
  for (int s = first_shared - 1; s >= 0; --s)
    if (types[s] == l.type) {
      l.kv_source = s;
      break;
    }
  if (l.kv_source < 0)
    return "KV-shared layer " + std::to_string(i) + " has no earlier layer of its type to share with";
  const LayerConfig& src = c.layers[l.kv_source];
  if (src.head_dim != l.head_dim || src.n_kv_heads != l.n_kv_heads)
    return "KV-shared layer " + std::to_string(i) + " has a geometry different from its source layer";
  return "";
}

}  // namespace eg::cfgparse
