// Gemma 4's vision tower + embed_vision (gemma-multimodal.md §2.3, §2.4; transformers
// modeling_gemma4.py Gemma4VisionModel / Gemma4MultimodalEmbedder, read, not copied). All compute
// in f32 on the engine's ops (matmul for every product, the attention scores included).
//
//   patches [P, 3·16·16] in [0, 1] (Gemma4Patches: the real patches only, (y, x, channel) order)
//   → X = 2·(p − 0.5) → E = X·input_projᵀ (no bias) + (T[0][x] + T[1][y]) (learned 2-D table)
//   → L encoder layers, each:
//       h = RMSNorm(x; input_layernorm)
//       q = clip(h; q_proj) → RMSNorm per head (q_norm), k likewise (k_norm), v = clip(h; v_proj)
//       → scale-less RMSNorm per head; 2-D RoPE (θ = rope_theta) on q and k: channels [0, d/2)
//       rotate with the x position, [d/2, d) with the y position, each half NeoX-paired;
//       attention among all P patches (bidirectional), scale 1.0; o = clip(att; o_proj)
//       x += RMSNorm(o; post_attention_layernorm)
//       h2 = RMSNorm(x; pre_feedforward_layernorm);
//       x += RMSNorm(clip(gelu_tanh(clip(h2; gate)) ⊙ clip(h2; up); down); post_feedforward_layernorm)
//   → pool k×k (k = pooling_kernel_size) by position: token t = ⌊x/k⌋ + (grid_w/k)·⌊y/k⌋,
//     Y[t] = Σ x_n · (1/k²), then Y ·= √Hv → (standardize: Y = (Y − std_bias) · std_scale)
//     = tower_hidden [N, Hv], N = (grid_h/k)·(grid_w/k)
//   → embed_vision: soft = RMSNorm_noscale(Y)·embedding_projectionᵀ [N, H] (not scaled by √H).
// RMSNorms are Gemma 4's plain-scale form (x·rsqrt(mean x² + eps)·w). clip(x; L) with
// use_clipped_linears: clamp(clamp(x, in_min, in_max)·Wᵀ, out_min, out_max), the four bounds
// being scalar tensors of the checkpoint (absent: ±inf, as transformers' buffers default).
// Computing on the real patches only equals transformers' padded run (padding keys are masked,
// padding rows zeroed before pooling).
//
// Tensors under "model.vision_tower." (transformers 5.17) or "vision_tower."; the embedder under
// "model.embed_vision." or "embed_vision."; F32/F16/BF16, used in place (the tower keeps
// pointers into `store`, which must outlive it).
#pragma once
#include <vector>

#include "format/safetensors.h"
#include "ops/ops.h"
#include "vision/preprocess.h"
#include "vision/vision_config.h"

namespace eg::vision {

class Gemma4VisionTower {
 public:
  /// Binds and validates every tensor against cfg (kind Gemma4). Throws eg::Error "this model has
  /// no vision tower" when the tower's tensors are absent, and names a missing tensor or a wrong
  /// shape otherwise.
  Gemma4VisionTower(const VisionConfig& cfg, const TensorStore& store);

  /// One image's patches → soft tokens [N, H] into `soft` (resized), N = p.num_soft_tokens.
  /// `tower_hidden`, when given, receives the tower output [N, Hv] (pooled, ×√Hv, standardized).
  /// Throws eg::Error when the patches do not fit the tower (patch width, a grid not divisible by
  /// the pooling kernel, a position beyond the position table).
  void encode(const Gemma4Patches& p, std::vector<float>& soft, std::vector<float>* tower_hidden = nullptr) const;

  const VisionConfig& config() const { return cfg_; }
  /// Bytes of the tower's tensors (for the memory budget).
  size_t weight_bytes() const { return bytes_; }

  /// A bias-free linear with optional clamps of its input and output.
  struct Clipped {
    ops::Weight w;
    float in_min, in_max, out_min, out_max;
  };

 private:
  struct Vec {
    const void* data = nullptr;
    DType dtype = DType::F32;
  };
  struct Layer {
    Clipped q, k, v, o, gate, up, down;
    Vec ln_in, q_norm, k_norm, ln_post_attn, ln_pre_ff, ln_post_ff;
  };
  VisionConfig cfg_;
  ops::Weight patch_;  // [Hv, 3·ps·ps]
  std::vector<float> pos_x_, pos_y_;  // [pos_size, Hv] each, f32
  std::vector<Layer> layers_;
  std::vector<float> std_bias_, std_scale_;  // [Hv] (standardize)
  ops::Weight proj_;   // embed_vision.embedding_projection [H, Hv]
  size_t bytes_ = 0;
};

}  // namespace eg::vision
