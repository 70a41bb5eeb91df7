// Gemma 3's vision tower: SigLIP encoder + Gemma3MultiModalProjector (gemma-multimodal.md §1.3,
// §1.4; transformers modeling_siglip.py, modeling_gemma3.py). All compute in f32 on the engine's
// ops (matmul for every product, the attention scores included).
//
//   pixels [3, S, S] → patch embedding (the 14×14 stride-14 conv with bias, as a matmul over
//   [P, 3·14·14] patches, p = row·(S/14) + col) + position table → L pre-LN encoder layers
//   (LayerNorm → q/k/v with bias → unmasked MHA, scale head_dim^-1/2 → out_proj + bias →
//   residual; LayerNorm → fc1 + bias → gelu_tanh → fc2 + bias → residual) → post_layernorm
//   = tower_hidden [P, Hv] → k×k average pool (k = (S/14)/√mm_tokens) in row-major token order →
//   RMSNorm with (1 + w), eps layer_norm_eps → · mm_input_projection_weight ([Hv, H], used as
//   x·W, not transposed) = soft tokens [mm_tokens, H] (not scaled by √H).
//
// Tensors (any of the prefixes "vision_tower.vision_model." (Hub), "vision_tower." (transformers
// 5.17 save_pretrained), "model.vision_tower."; projector under "multi_modal_projector." or
// "model.multi_modal_projector."), F32/F16/BF16, used in place from the checkpoint mapping: the
// tower keeps pointers into `store`, which must outlive it.
#pragma once
#include <vector>

#include "format/safetensors.h"
#include "ops/ops.h"
#include "vision/vision_config.h"

namespace eg::vision {

class SiglipTower {
 public:
  /// Binds and validates every tensor against cfg (kind Siglip). Throws eg::Error naming a
  /// missing tensor or a wrong shape.
  SiglipTower(const VisionConfig& cfg, const TensorStore& store);

  /// pixel_values [3, S, S] (gemma3_pixel_values) → soft tokens [mm_tokens_per_image, H] into
  /// `soft` (resized). When `tower_hidden` is given it receives post_layernorm's output [P, Hv].
  void encode(const float* pixels, std::vector<float>& soft, std::vector<float>* tower_hidden = nullptr) const;

  const VisionConfig& config() const { return cfg_; }
  /// Bytes of the tower's tensors (for the memory budget).
  size_t weight_bytes() const { return bytes_; }

 private:
  struct Vec {
    const void* data = nullptr;
    DType dtype = DType::F32;
  };
  struct Layer {
    ops::Weight q, k, v, o, fc1, fc2;
    Vec bq, bk, bv, bo, b1, b2, ln1_w, ln1_b, ln2_w, ln2_b;
  };
  VisionConfig cfg_;
  ops::Weight patch_;      // [Hv, 3·ps·ps]
  Vec patch_bias_;
  ops::Weight pos_;        // [P, Hv]
  std::vector<Layer> layers_;
  Vec post_w_, post_b_;
  Vec mm_norm_;            // [Hv]
  std::vector<float> mm_proj_t_;  // mm_input_projection_weight transposed to [H, Hv], f32
  size_t bytes_ = 0;
};

}  // namespace eg::vision
