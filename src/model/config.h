// ModelConfig: the architecture of a Gemma checkpoint as plain data (per-layer arrays and flags),
// filled from a Hugging Face config.json by the loader of each family. The forward pass reads
// only this struct; kernels never ask which model they serve.
//
// Follows ../shared/docs/gemma-architectures.md §1-§3 (transformers configuration_gemma2.py,
// configuration_gemma3.py, configuration_gemma4.py). One loader per family fills it:
// model/gemma2.cpp, model/gemma3.cpp, model/gemma4.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace eg {

enum class ModelFamily { Gemma2, Gemma3, Gemma4 };
enum class LayerType { Sliding, Full };

const char* family_name(ModelFamily f);
const char* layer_type_name(LayerType t);

/// Per-layer attention geometry, RoPE and MLP width.
struct LayerConfig {
  LayerType type = LayerType::Full;
  int head_dim = 0;
  int n_kv_heads = 0;
  float rope_theta = 10000.0f;
  float rope_linear_factor = 1.0f;  // "linear" rope scaling: inv_freq /= factor
  int rope_dims = 0;                // channels paired for RoPE: i with i + rope_dims/2 (== head_dim)
  int rope_pairs = 0;               // pairs with a non-zero frequency θ^(-2i/rope_dims); the rest stay
                                    // unrotated (Gemma 4 "proportional": int(f·d/2); else rope_dims/2)
  int intermediate_size = 0;        // MLP width (Gemma 4 E2B: doubled on KV-shared layers)
  int kv_source = -1;               // KV-shared (Gemma 4): attends to this earlier layer's K/V; -1 = own
  bool k_eq_v = false;              // Gemma 4 attention_k_eq_v full layer: no v_proj, V from raw K
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
  bool v_norm = false;              // Gemma 4: scale-less RMSNorm of V per head
  bool layer_scalar = false;        // Gemma 4: per-layer scalar multiplying the residual stream
  bool tie_word_embeddings = true;
  /// use_bidirectional_attention (EmbeddingGemma, Gemma3TextModel): an encoder, no causal mask.
  /// Full layers see every position; sliding layers see the symmetric window |q - k| <= W/2
  /// (W = sliding_window as written in config.json, integer division), which is transformers'
  /// rule (configuration_gemma3.py sets sliding_window = W//2 + 1 and modeling_gemma3.py's
  /// _bidirectional_window_overlay keeps |q - k| < that) and llama.cpp's SWA_TYPE_SYMMETRIC.
  /// Such a model runs through Model::encode only (Model::forward refuses it).
  bool bidirectional = false;
  /// Gemma 4 text_config.use_bidirectional_attention = "vision" (26B-A4B / 31B;
  /// gemma-multimodal.md §2.5.3, rule (C) of transformers 5.17's create_masks_for_vision_model):
  /// a bidirectional image block (EmbedSpan::bidirectional) sees its own later rows on sliding
  /// layers only, `(causal OR same block) AND k > q − W`; full layers stay causal. Unset (Gemma 3):
  /// the block is bidirectional on every layer.
  bool image_blocks_sliding_only = false;
  std::vector<LayerConfig> layers;

  // Gemma 4 per-layer embeddings (PLE): table [ple_vocab, n_layers·ple_dim]; 0 = none.
  // -1 while unknown (key absent: resolved from the tensors when the weights are bound).
  int ple_dim = 0;
  int ple_vocab = 0;

  // Gemma 4 mixture of experts beside the dense MLP (26B-A4B); n_experts 0 = none.
  int n_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;

  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;   // from config.json (generation_config.json adds more)

  /// Parameter count of the text decoder (tied LM head counted once).
  int64_t parameter_count() const;
  /// Number of layers that own a KV cache (not KV-shared).
  int n_kv_layers() const;
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
