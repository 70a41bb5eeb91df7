// Binding a checkpoint's tensors to the model's weight slots, with every shape validated against
// the ModelConfig before anything runs. Weights stay in the memory-mapped file (no copies).
//
// Tensor names follow transformers (modeling_gemma2/3/4.py, gemma-architectures.md §1.3, §2.3,
// §3.4); the text decoder may sit under one of these prefixes: "model." (…ForCausalLM),
// "language_model.model." (Gemma 3 multimodal checkpoints as published on the Hub),
// "model.language_model." (Gemma 4 multimodal, and Gemma 3 re-saved by transformers >= 4.52).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "model/config.h"
#include "ops/ops.h"

namespace eg {

/// A 1-D norm weight [n].
struct NormWeight {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t n = 0;
};

struct LayerWeights {
  ops::Weight q, k, v, o;      // q [nh·hd, H], k/v [nkv·hd, H] (absent: KV-shared / K=V), o [H, nh·hd]
  ops::Weight gate, up, down;  // gate/up [I, H], down [H, I]
  NormWeight input_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm;  // [H]
  NormWeight q_norm, k_norm;   // [hd] (Gemma 3/4; k_norm absent on KV-shared layers)
  float layer_scalar = 1.0f;   // Gemma 4 layer_scalar [1]

  // Gemma 4 per-layer embeddings: gate [P, H], projection [H, P], post norm [H].
  ops::Weight ple_gate, ple_proj;
  NormWeight ple_post_norm;

  // Gemma 4 MoE: router proj [E, H], router scale [H], per-expert scale [E];
  // experts gate_up [E, 2·Im, H] (rows < Im: gate), down [E, H, Im]; extra norms [H].
  ops::Weight router;
  NormWeight router_scale, per_expert_scale;
  const void* experts_gate_up = nullptr;
  const void* experts_down = nullptr;
  DType experts_dtype = DType::F32;       // of experts_gate_up
  DType experts_down_dtype = DType::F32;  // of experts_down (GGUF files may differ: Q4_K / Q5_0)
  NormWeight pre_ffw_norm_2, post_ffw_norm_1, post_ffw_norm_2;

  /// Expert e's gate_up [2·Im, H] and down [H, Im] matrices.
  ops::Weight expert_gate_up(int e, int64_t Im, int64_t H) const;
  ops::Weight expert_down(int e, int64_t Im, int64_t H) const;
};

struct ModelWeights {
  TensorStore store;           // owns the mappings the views below point into
  std::string prefix;          // e.g. "model."
  ops::Weight embed;           // [V, H]; also the tied LM head
  NormWeight final_norm;       // [H]
  ops::Weight ple_embed;       // Gemma 4 PLE table [V_ple, L·P]
  ops::Weight ple_model_proj;  // [L·P, H]
  NormWeight ple_proj_norm;    // [P]
  std::vector<LayerWeights> layers;
  std::vector<std::string> ignored_prefixes;  // e.g. "vision_tower." (reported to the user)
  /// The CPU backend's packed copies that Weight::packed points into (model/cpu_repack.h).
  std::vector<std::shared_ptr<uint8_t>> packed_buffers;
};

/// The decoder's tensor prefix in `store`; throws eg::Error when no embedding tensor is found.
std::string find_decoder_prefix(const TensorStore& store);

/// Settles what config.json left open but the tensors tell (Gemma 4 PLE width when
/// hidden_size_per_layer_input is absent). Throws eg::Error on inconsistency.
void resolve_config_from_tensors(ModelConfig& cfg, const TensorStore& store);

/// Binds and validates. Throws eg::Error naming the tensor for a missing tensor or a shape that
/// does not match the config ("model.layers.3.self_attn.q_proj.weight: shape [256, 256], expected
/// [256, 128]").
ModelWeights bind_weights(TensorStore store, const ModelConfig& cfg);

}  // namespace eg
