// The vision half of a multimodal config.json (gemma-multimodal.md §1.1, §2.1): which tower, its
// geometry, and the image marker tokens of the text side.
#pragma once
#include <string>

namespace eg::vision {

enum class TowerKind { None, Siglip /* Gemma 3 */, Gemma4 };

struct VisionConfig {
  TowerKind kind = TowerKind::None;
  int hidden = 0;          // Hv
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;        // Gemma 4
  int head_dim = 0;
  int patch_size = 0;
  int image_size = 0;      // Gemma 3: input side (pixels)
  int channels = 3;
  float eps = 1e-6f;       // layer_norm_eps (Gemma 3; also the projector RMSNorm) / rms_norm_eps
  int text_hidden = 0;     // H: width of the soft tokens
  // Text-side tokens.
  int mm_tokens_per_image = 0;  // Gemma 3: soft tokens per image (a square number)
  int boi_id = -1, eoi_id = -1, image_token_id = -1;
  // Gemma 4.
  int pooling_kernel = 3;
  int position_embedding_size = 0;
  float rope_theta = 100.0f;
  bool clipped_linears = false;
  bool standardize = false;
};

/// Reads <dir>/config.json. No "vision_config" (a text-only checkpoint): kind None. Throws
/// eg::Error naming the field on a malformed or unsupported vision_config (e.g. a SigLIP with an
/// attention-pooling head, an activation other than gelu_pytorch_tanh, a non-square token grid).
VisionConfig load_vision_config(const std::string& dir);

}  // namespace eg::vision
