// Binding a checkpoint's tensors to the model's weight slots, with every shape validated against
// the ModelConfig before anything runs. Weights stay in the memory-mapped file (no copies).
//
// Tensor names follow transformers (modeling_gemma3.py); the text decoder may sit under one of
// these prefixes: "model." (Gemma3ForCausalLM), "language_model.model." (multimodal checkpoints
// as published on the Hub), "model.language_model." (re-saved by transformers >= 4.52).
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
  ops::Weight q, k, v, o;      // q [nh·hd, H], k/v [nkv·hd, H], o [H, nh·hd]
  ops::Weight gate, up, down;  // gate/up [I, H], down [H, I]
  NormWeight input_norm, post_attn_norm, pre_ffw_norm, post_ffw_norm;  // [H]
  NormWeight q_norm, k_norm;   // [hd] (Gemma 3)
};

struct ModelWeights {
  TensorStore store;           // owns the mappings the views below point into
  std::string prefix;          // e.g. "model."
  ops::Weight embed;           // [V, H]; also the tied LM head
  NormWeight final_norm;       // [H]
  std::vector<LayerWeights> layers;
  std::vector<std::string> ignored_prefixes;  // e.g. "vision_tower." (reported to the user)
};

/// Binds and validates. Throws eg::Error naming the tensor for a missing tensor or a shape that
/// does not match the config ("model.layers.3.self_attn.q_proj.weight: shape [256, 256], expected
/// [256, 128]").
ModelWeights bind_weights(TensorStore store, const ModelConfig& cfg);

}  // namespace eg
