#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"

namespace eg {

using nlohmann::json;

const char* family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::Gemma2: return "gemma2";
    case ModelFamily::Gemma3: return "gemma3";
    case ModelFamily::Gemma4: return "gemma4";
  }
  return "?";
}

const char* layer_type_name(LayerType t) {
  return t == LayerType::Sliding ? "sliding_attention" : "full_attention";
}

int64_t ModelConfig::parameter_count() const {
  const int64_t H = hidden_size;
  int64_t n = static_cast<int64_t>(vocab_size) * H + H;  // embedding (tied head) + final norm
  for (const auto& l : layers) {
    const int64_t q = static_cast<int64_t>(n_heads) * l.head_dim;
    const int64_t kv = static_cast<int64_t>(l.n_kv_heads) * l.head_dim;
    n += H * q + 2 * H * kv + q * H;           // q, k, v, o
    n += 3 * H * l.intermediate_size;          // gate, up, down
    n += 4 * H;                                // four layer norms
    if (qk_norm) n += 2 * l.head_dim;
  }
  return n;
}

namespace {

// Typed field access with clear errors.
struct Fields {
  const json& j;
  const std::string& origin;

  bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }

  int get_int(const char* k) const {
    if (!has(k)) throw Error(origin + ": missing required field '" + k + "'");
    return as_int(j.at(k), k);
  }
  int get_int(const char* k, int def) const { return has(k) ? as_int(j.at(k), k) : def; }
  double get_num(const char* k, double def) const {
    if (!has(k)) return def;
    if (!j.at(k).is_number()) throw Error(origin + ": field '" + k + "' must be a number");
    return j.at(k).get<double>();
  }
  int as_int(const json& v, const char* k) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1LL << 31) - 1)
      throw Error(origin + ": field '" + k + "' must be a non-negative integer");
    return static_cast<int>(v.get<int64_t>());
  }
};

struct RopeSpec {
  float theta = 10000.0f;
  float linear_factor = 1.0f;
};

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
  } else if (type != "default") {
    throw Error(origin + ": unsupported rope_type '" + type + "' (supported: default, linear)");
  }
  return r;
}

void parse_eos(const json& v, std::vector<int>& out) {
  auto add = [&](int id) {
    for (int e : out) if (e == id) return;
    out.push_back(id);
  };
  if (v.is_number_integer()) add(v.get<int>());
  else if (v.is_array())
    for (const auto& e : v) if (e.is_number_integer()) add(e.get<int>());
}

// Gemma 3 text config (flat object `t`).
void fill_gemma3(const json& t, const std::string& origin, ModelConfig& c) {
  Fields f{t, origin};
  c.family = ModelFamily::Gemma3;
  c.vocab_size = f.get_int("vocab_size", 262208);
  c.hidden_size = f.get_int("hidden_size", 2304);
  c.n_layers = f.get_int("num_hidden_layers", 26);
  c.n_heads = f.get_int("num_attention_heads", 8);
  const int n_kv = f.get_int("num_key_value_heads", 4);
  const int head_dim = f.get_int("head_dim", 256);
  const int inter = f.get_int("intermediate_size", 9216);
  c.sliding_window = f.get_int("sliding_window", 4096);
  c.max_position_embeddings = f.get_int("max_position_embeddings", 131072);
  c.rms_norm_eps = static_cast<float>(f.get_num("rms_norm_eps", 1e-6));
  const double qpas = f.get_num("query_pre_attn_scalar", 256);
  if (!(qpas > 0)) throw Error(origin + ": query_pre_attn_scalar must be > 0");
  c.query_scale = static_cast<float>(std::pow(qpas, -0.5));
  c.attn_softcap = static_cast<float>(f.get_num("attn_logit_softcapping", 0.0));
  c.final_softcap = static_cast<float>(f.get_num("final_logit_softcapping", 0.0));
  c.norm_offset = 1.0f;
  c.qk_norm = true;
  c.tie_word_embeddings = !t.contains("tie_word_embeddings") || !t["tie_word_embeddings"].is_boolean() ||
                          t["tie_word_embeddings"].get<bool>();
  if (t.contains("use_bidirectional_attention") && t["use_bidirectional_attention"].is_boolean() &&
      t["use_bidirectional_attention"].get<bool>())
    throw Error(origin + ": use_bidirectional_attention=true (an embedding model) is not supported");
  if (t.contains("hidden_activation") && t["hidden_activation"].is_string() &&
      t["hidden_activation"] != "gelu_pytorch_tanh")
    throw Error(origin + ": unsupported hidden_activation '" +
                t["hidden_activation"].get<std::string>() + "'");

  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || n_kv <= 0 ||
      head_dim <= 0 || inter <= 0)
    throw Error(origin + ": sizes must be positive");
  if (c.n_heads % n_kv != 0)
    throw Error(origin + ": num_attention_heads must be a multiple of num_key_value_heads");
  if (head_dim % 2 != 0) throw Error(origin + ": head_dim must be even for RoPE");

  // Layer types: explicit list (transformers 5) or the sliding pattern (Hub layout).
  std::vector<LayerType> types(c.n_layers);
  if (f.has("layer_types")) {
    const json& lt = t["layer_types"];
    if (!lt.is_array() || static_cast<int>(lt.size()) != c.n_layers)
      throw Error(origin + ": layer_types must be a list of num_hidden_layers entries");
    for (int i = 0; i < c.n_layers; ++i) {
      if (lt[i] == "sliding_attention") types[i] = LayerType::Sliding;
      else if (lt[i] == "full_attention") types[i] = LayerType::Full;
      else throw Error(origin + ": unknown layer type in layer_types[" + std::to_string(i) + "]");
    }
  } else {
    int pattern = 6;
    if (f.has("sliding_window_pattern")) pattern = f.get_int("sliding_window_pattern");
    else if (f.has("_sliding_window_pattern")) pattern = f.get_int("_sliding_window_pattern");
    if (pattern <= 0) throw Error(origin + ": sliding_window_pattern must be > 0");
    for (int i = 0; i < c.n_layers; ++i)
      types[i] = ((i + 1) % pattern == 0) ? LayerType::Full : LayerType::Sliding;
  }

  // RoPE: rope_parameters per layer type (v5) or rope_theta/rope_local_base_freq/rope_scaling.
  RopeSpec full{1000000.0f, 1.0f}, local{10000.0f, 1.0f};
  if (f.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object()) throw Error(origin + ": rope_parameters must be an object");
    if (rp.contains("full_attention") || rp.contains("sliding_attention")) {
      if (rp.contains("full_attention")) full = parse_rope_dict(rp["full_attention"], origin, 1e6f);
      if (rp.contains("sliding_attention"))
        local = parse_rope_dict(rp["sliding_attention"], origin, 1e4f);
    } else {
      full = parse_rope_dict(rp, origin, 1e6f);
      local.theta = static_cast<float>(f.get_num("rope_local_base_freq", 10000.0));
    }
  } else {
    full.theta = static_cast<float>(f.get_num("rope_theta", 1000000.0));
    local.theta = static_cast<float>(f.get_num("rope_local_base_freq", 10000.0));
    if (f.has("rope_scaling")) full = parse_rope_dict(t["rope_scaling"], origin, full.theta);
  }
  if (!(full.theta > 0) || !(local.theta > 0)) throw Error(origin + ": rope theta must be > 0");

  c.layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[i];
    l.type = types[i];
    l.head_dim = head_dim;
    l.n_kv_heads = n_kv;
    l.rope_dims = head_dim;
    l.intermediate_size = inter;
    const RopeSpec& r = types[i] == LayerType::Full ? full : local;
    l.rope_theta = r.theta;
    l.rope_linear_factor = r.linear_factor;
  }
  c.bos_token_id = f.get_int("bos_token_id", 2);
  c.pad_token_id = f.get_int("pad_token_id", 0);
  if (t.contains("eos_token_id")) parse_eos(t["eos_token_id"], c.eos_token_ids);
}

}  // namespace

ModelConfig parse_hf_config(const std::string& config_json, const std::string& generation_json,
                            const std::string& origin) {
  json j;
  try {
    j = json::parse(config_json);
  } catch (const json::exception& e) {
    throw Error(origin + ": invalid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw Error(origin + ": expected a JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw Error(origin + ": missing 'model_type'");
  ModelConfig c;
  c.model_type = j["model_type"].get<std::string>();
  if (c.model_type == "gemma3_text") {
    fill_gemma3(j, origin, c);
  } else if (c.model_type == "gemma3") {
    if (!j.contains("text_config") || !j["text_config"].is_object())
      throw Error(origin + ": gemma3 checkpoint without a 'text_config' object");
    fill_gemma3(j["text_config"], origin + " (text_config)", c);
    c.multimodal_wrapper = true;
    if (j.contains("eos_token_id")) parse_eos(j["eos_token_id"], c.eos_token_ids);
  } else {
    throw Error(origin + ": unsupported model_type '" + c.model_type +
                "' (supported: gemma3_text, gemma3)");
  }
  if (!generation_json.empty()) {
    try {
      json g = json::parse(generation_json);
      if (g.is_object() && g.contains("eos_token_id")) parse_eos(g["eos_token_id"], c.eos_token_ids);
    } catch (const json::exception& e) {
      throw Error(origin + ": invalid generation_config.json (" + std::string(e.what()) + ")");
    }
  }
  return c;
}

ModelConfig load_hf_config(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) throw Error("model path does not exist: " + dir);
  if (!fs::is_directory(dir)) throw Error("model path is not a directory: " + dir);
  const std::string cfg = (fs::path(dir) / "config.json").string();
  if (!fs::exists(cfg)) throw Error("missing config.json in " + dir);
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::string gen;
  if (fs::exists(gen_path)) gen = read_file(gen_path);
  return parse_hf_config(read_file(cfg), gen, cfg);
}

}  // namespace eg
