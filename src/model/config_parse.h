// Internal helpers shared by the per-family config.json loaders (gemma2.cpp, gemma3.cpp,
// gemma4.cpp): typed field access with clear errors, RoPE parameter dictionaries, eos ids,
// layer types. Not part of the public API.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace eg::cfgparse {

using nlohmann::json;

/// Typed access to one JSON object; every error names the origin file and the field.
struct Fields {
  const json& j;
  const std::string& origin;

  bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
  int get_int(const char* k) const;             // required
  int get_int(const char* k, int def) const;    // optional
  double get_num(const char* k, double def) const;
  bool get_bool(const char* k, bool def) const;
  [[noreturn]] void fail(const std::string& msg) const;
};

/// One RoPE parameter set (HF modeling_rope_utils): rope_type default | linear | proportional.
struct RopeSpec {
  float theta = 10000.0f;
  float linear_factor = 1.0f;
  bool proportional = false;
  float partial_rotary_factor = 1.0f;
};

/// Parses {"rope_type"|"type", "rope_theta", "factor", "partial_rotary_factor"}.
RopeSpec parse_rope_dict(const json& d, const std::string& origin, float default_theta);

/// Adds eos ids (an int or a list) to `out`, without duplicates.
void add_eos_ids(const json& v, std::vector<int>& out);

/// layer_types list of n entries, or nullptr-like absence (returns false).
bool parse_layer_types(const Fields& f, int n, std::vector<LayerType>& out);

/// Fills the common Gemma fields (sizes, eps, window, eos/bos/pad), validating positivity.
void fill_common(const Fields& f, ModelConfig& c, int default_vocab, int default_window);

/// Gemma 2/3 attention geometry, the same for every layer: head_dim, KV heads, MLP width, and the
/// scaling query_pre_attn_scalar^-0.5 with optional attention soft-capping; (1+w) norms.
struct UniformGeometry {
  int n_kv = 0;
  int head_dim = 0;
  int intermediate = 0;
};
UniformGeometry fill_gemma23_attention(const Fields& f, ModelConfig& c);

/// Fills c.layers with the same geometry on every layer, the given types, and the RoPE of each
/// layer's type (full / sliding).
void fill_uniform_layers(ModelConfig& c, const UniformGeometry& g, const std::vector<LayerType>& types,
                         const RopeSpec& full, const RopeSpec& sliding);

/// Applies RoPE spec to a layer: inv-freq geometry for default/linear/proportional.
void apply_rope(const RopeSpec& r, LayerConfig& l);

/// Gemma 4 KV sharing (gemma-architectures.md §3.1; transformers modeling_gemma4.py): a layer
/// i >= first_shared reads the K/V of the last non-shared layer of the same type. Sets l.kv_source
/// (c.layers[0..i) must be filled). Returns "" or an error message (no such layer, or a
/// geometry different from the source's).
std::string assign_kv_source(const ModelConfig& c, LayerConfig& l, int i, int first_shared,
                             const std::vector<LayerType>& types);

}  // namespace eg::cfgparse

namespace eg {
/// Per-family loaders (each in its own file). `t` is the text config object.
void load_gemma2_config(const nlohmann::json& t, const std::string& origin, ModelConfig& c);
void load_gemma3_config(const nlohmann::json& t, const std::string& origin, ModelConfig& c);
void load_gemma4_config(const nlohmann::json& t, const std::string& origin, ModelConfig& c);
}  // namespace eg
