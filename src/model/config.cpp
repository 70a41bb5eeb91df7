#include "model/config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "model/config_parse.h"

namespace eg {

using nlohmann::json;
using cfgparse::add_eos_ids;

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
  if (ple_dim > 0) {
    const int64_t LP = static_cast<int64_t>(n_layers) * ple_dim;
    n += static_cast<int64_t>(ple_vocab) * LP + LP * H + ple_dim;  // table, projection, norm
  }
  for (const auto& l : layers) {
    const int64_t q = static_cast<int64_t>(n_heads) * l.head_dim;
    const int64_t kv = static_cast<int64_t>(l.n_kv_heads) * l.head_dim;
    n += H * q + q * H;                                   // q, o
    if (l.kv_source < 0) n += H * kv * (l.k_eq_v ? 1 : 2);  // k (+ v)
    n += 3 * H * l.intermediate_size;                     // gate, up, down
    n += 4 * H;                                           // four layer norms
    if (qk_norm) n += l.head_dim * (l.kv_source < 0 ? 2 : 1);
    if (layer_scalar) n += 1;
    if (ple_dim > 0) n += 2 * H * ple_dim + H;            // gate, projection, post norm
    if (n_experts > 0)
      n += static_cast<int64_t>(n_experts) * 3 * H * moe_intermediate_size  // experts
           + static_cast<int64_t>(n_experts) * H + H + n_experts          // router proj, scale, per-expert scale
           + 3 * H;                                                        // extra norms
  }
  return n;
}

int ModelConfig::n_kv_layers() const {
  int n = 0;
  for (const auto& l : layers) n += l.kv_source < 0;
  return n;
}

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
  // Text-only model types, and the multimodal wrappers whose text decoder sits in text_config.
  struct Family {
    const char* text_type;
    const char* wrapper_type;
    void (*load)(const json&, const std::string&, ModelConfig&);
  };
  static const Family kFamilies[] = {{"gemma2", nullptr, load_gemma2_config},
                                     {"gemma3_text", "gemma3", load_gemma3_config},
                                     {"gemma4_text", "gemma4", load_gemma4_config}};
  bool known = false;
  for (const Family& fam : kFamilies) {
    if (c.model_type == fam.text_type) {
      fam.load(j, origin, c);
      known = true;
    } else if (fam.wrapper_type && c.model_type == fam.wrapper_type) {
      if (!j.contains("text_config") || !j["text_config"].is_object())
        throw Error(origin + ": " + c.model_type + " checkpoint without a 'text_config' object");
      fam.load(j["text_config"], origin + " (text_config)", c);
      c.multimodal_wrapper = true;
      if (j.contains("eos_token_id")) add_eos_ids(j["eos_token_id"], c.eos_token_ids);
      known = true;
    }
  }
  if (!known)
    throw Error(origin + ": unsupported model_type '" + c.model_type +
                "' (supported: gemma2, gemma3_text, gemma3, gemma4_text, gemma4)");
  if (!generation_json.empty()) {
    try {
      json g = json::parse(generation_json);
      if (g.is_object() && g.contains("eos_token_id")) add_eos_ids(g["eos_token_id"], c.eos_token_ids);
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
