// Gemma 4's audio tower + embed_audio (gemma-multimodal.md §3.4, §3.5; transformers 5.17
// modeling_gemma4.py Gemma4AudioModel / Gemma4MultimodalEmbedder, read, not copied). f32 on the
// engine's ops (every product through ops::matmul; the local attention is scalar, it is tiny).
//
//   features [n, 128] (the valid frames only: padding never reaches valid outputs, §3.4.5)
//   → 2 × { Conv2d 3×3 stride 2 pad 1 no bias (im2col + matmul) → LayerNorm over channels
//           (weight only) → ReLU }: [1, n, 128] → [C0, ⌈n/2⌉, 64] → [C1, T, 32], T = ⌈⌈n/2⌉/2⌉
//   → flatten (mel, channel), channel fastest → input_proj_linear (no bias) → x [T, Ha]
//   → L conformer layers (clip_g = clamp ±min(gradient_clipping, f32 max)):
//       x += ½·RMSNorm(clip_g(W2·silu(W1·RMSNorm(clip_g x))))                      (feed_forward1)
//       x += RMSNorm(clip_g(Attn(RMSNorm(clip_g x))))                               (self_attn)
//       u = clip(RMSNorm x; linear_start), GLU, causal depthwise conv (k taps),
//       x += clip(silu(RMSNorm(clip_g c)); linear_end)                              (lconv1d)
//       x += ½·FFN2; x = RMSNorm(clip_g x; norm_out)
//     Attn: q·(D^−½/ln 2)·softplus(per_dim_scale), k·ln(1+e)/ln 2, score q·k + q·Rk[δ] for
//     δ = t − s ∈ [0, chunk), Rk = sinusoid table (distances 0 … context_left − 1) · relative_k_projᵀ,
//     soft-cap 50·tanh(·/50), softmax over the allowed keys, clip(·; post).
//   → output_proj (with bias) [T, P] = tower_hidden → embed_audio: RMSNorm_noscale · Wᵀ [T, H].
// clip(x; L) with use_clipped_linears: clamp(clamp(x, in_min, in_max)·Wᵀ, out_min, out_max).
//
// Tensors under "model.audio_tower." / "audio_tower." and "model.embed_audio." / "embed_audio.",
// F32/F16/BF16, used in place (`store` must outlive the tower).
#pragma once
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "ops/ops.h"

namespace eg::audio {

/// config.json "audio_config" (model_type gemma4_audio) and the token ids around it.
struct AudioConfig {
  bool present = false;
  int hidden = 1024, layers = 12, heads = 8;
  std::vector<int> conv_channels = {128, 32};
  int conv_kernel = 5;
  int chunk = 12, context_left = 13, context_right = 0;
  float logit_cap = 50.0f, invalid_logit = -1e9f, residual_weight = 0.5f;
  bool clipped_linears = true;
  float gradient_clipping = 1e10f;
  float eps = 1e-6f;
  int output_dims = 1536;
  int text_hidden = 0;
  int audio_token_id = -1, boa_id = -1, eoa_id = -1;
};

/// Reads `dir`/config.json. present = false when it has no (or a null) audio_config. Throws
/// eg::Error for values this tower does not implement (context_right != 0, hidden_act not silu,
/// a head count that does not divide hidden, other than 2 conv layers).
AudioConfig load_audio_config(const std::string& dir);

class Gemma4AudioTower {
 public:
  /// Binds and validates every tensor. Throws eg::Error "this model has no audio tower" when the
  /// tower's tensors are absent, and names a missing tensor or a wrong shape otherwise.
  Gemma4AudioTower(const AudioConfig& cfg, const TensorStore& store);

  /// Output tokens for n valid feature frames: ⌈⌈n/2⌉/2⌉.
  static int tokens_for_frames(int n) { return ((n + 1) / 2 + 1) / 2; }

  /// n valid frames of `mel` log-mel features [n, mel] → soft tokens [T, H] into `soft`.
  /// `tower_hidden` receives output_proj's rows [T, output_dims]. Throws eg::Error for n < 1 or a
  /// mel width that does not fit input_proj_linear.
  void encode(const float* features, int n, int mel, std::vector<float>& soft,
              std::vector<float>* tower_hidden = nullptr) const;

  const AudioConfig& config() const { return cfg_; }
  size_t weight_bytes() const { return bytes_; }

  struct Clipped {
    ops::Weight w;
    float in_min, in_max, out_min, out_max;
  };
  struct Vec {
    const void* data = nullptr;
    DType dtype = DType::F32;
  };

 private:
  struct Ffn {
    Vec pre, post;
    Clipped w1, w2;
  };
  struct Layer {
    Ffn ff1, ff2;
    Vec pre_attn, post_attn, lc_pre, lc_norm, out_norm;
    Clipped q, k, v, post, lc_start, lc_end;
    ops::Weight rel_k;
    std::vector<float> q_scale;  // [D]: D^−½/ln 2 · softplus(per_dim_scale)
    std::vector<float> dw;       // [Ha, kernel] depthwise conv taps
  };
  void ffn(const Ffn& f, float* x, int T, std::vector<float>& h, std::vector<float>& u, std::vector<float>& tmp) const;
  void attention(const Layer& l, const float* h, int T, float* out, std::vector<float>& tmp) const;

  AudioConfig cfg_;
  int mel_in_ = 128;      // mel bins the subsampler expects (input_proj width / C1 · 4)
  int ffn_ = 0;           // feed-forward width
  ops::Weight conv_[2];   // [C_out, C_in·9]
  Vec conv_norm_[2];
  ops::Weight in_proj_;   // [Ha, C1·mel/4]
  std::vector<Layer> layers_;
  std::vector<float> rel_table_;  // [context_left, Ha]: row r is distance r (sin | cos)
  ops::Weight out_w_;
  Vec out_b_;
  ops::Weight emb_;       // [H, output_dims]
  size_t bytes_ = 0;
};

}  // namespace eg::audio
