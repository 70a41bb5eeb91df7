// ModelConfig: the architecture of a Gemma checkpoint as plain data (per-layer arrays and flags),
// filled from a Hugging Face config.json by the loader of each family. The forward pass reads
// only this struct; kernels never ask which model they serve.
//
// Follows ../shared/docs/gemma-architectures.md §1-§2 (transformers configuration_gemma3.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace eg {

enum class ModelFamily { Gemma2, Gemma3, Gemma4 };
enum class LayerType { Sliding, Full };

const char* family_name(ModelFamily f);
const char* layer_type_name(LayerType t);

/// Per-layer attention geometry and RoPE.
struct LayerConfig {
  LayerType type = LayerType::Full;
  int head_dim = 0;
  int n_kv_heads = 0;
  float rope_theta = 10000.0f;
  float rope_linear_factor = 1.0f;  // "linear" rope scaling: inv_freq /= factor
  int rope_dims = 0;                // rotated channels (== head_dim unless partial rotary)
  int intermediate_size = 0;        // MLP width
};

struct ModelConfig {
  ModelFamily family = ModelFamily::Gemma3;
  std::string model_type;       // as in config.json ("gemma3_text", "gemma3", ...)
  bool multimodal_wrapper = false;  // text part of a multimodal checkpoint (vision tower ignored)

  int vocab_size = 0;
  int hidden_size = 0;
  int n_layers = 0;
  int n_heads = 0;
  int sliding_window = 0;           // W: keys q-W+1..q are visible on sliding layers
  int max_position_embeddings = 0;  // the model's context length (tokens)
  float rms_norm_eps = 1e-6f;
  float norm_offset = 1.0f;         // Gemma 2/3 RMSNorm multiplies by (1 + w): offset 1
  float query_scale = 1.0f;         // attention scaling (query_pre_attn_scalar^-0.5)
  float attn_softcap = 0.0f;        // 0 = none
  float final_softcap = 0.0f;       // 0 = none
  bool qk_norm = true;              // Gemma 3/4 per-head q_norm / k_norm
  bool tie_word_embeddings = true;
  std::vector<LayerConfig> layers;

  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;   // from config.json (generation_config.json adds more)

  /// Parameter count of the text decoder (tied LM head counted once).
  int64_t parameter_count() const;
};

/// Reads <dir>/config.json (and <dir>/generation_config.json for extra eos ids when present).
/// Accepts the Hub layout (rope_theta, rope_local_base_freq, sliding_window_pattern,
/// rope_scaling) and the transformers 5 layout (rope_parameters per layer type, layer_types).
/// Throws eg::Error for a missing/invalid file, a missing or ill-typed required field, or an
/// unsupported model_type (the message lists the supported ones).
ModelConfig load_hf_config(const std::string& dir);

/// Same, from config.json text (generation_config text may be empty). `origin` names the source
/// in error messages.
ModelConfig parse_hf_config(const std::string& config_json, const std::string& generation_json,
                            const std::string& origin);

}  // namespace eg
