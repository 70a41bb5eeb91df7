// The tensors of a Gemma 4 mmproj file (model/mmproj.h): llama.cpp name, the Hugging Face name
// our towers bind (canonical prefixes "model.vision_tower.", "model.embed_vision.",
// "model.audio_tower.", "model.embed_audio."), both shapes (PyTorch order) and what llama.cpp's
// converter (convert_hf_to_gguf.py Gemma4VisionAudioModel, gguf-py tensor_mapping.py; read, not
// copied) does to the tensor on the way:
//   PatchPermute  patch_embedder.input_proj.weight [Hv, ps·ps·3], inner order (y, x, channel),
//                 is stored as a conv kernel [Hv, 3, ps, ps] (reshape (Hv, ps, ps, 3), permute
//                 (0, 3, 1, 2)): stored[o][c][y][x] = hf[o][(y·ps + x)·3 + c].
//   Softplus      audio self_attn.per_dim_scale is stored as softplus(w) (inverse on read:
//                 w = s + log(−expm1(−s))).
//   Squeeze       audio lconv1d.depthwise_conv1d.weight [Ha, 1, k] is stored [Ha, k].
//   Scalar        every clip bound (input_min/max, output_min/max, shape []) is stored as [1], F32.
// The bounds and std_bias / std_scale are optional: written when the checkpoint has them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "audio/gemma4_audio.h"
#include "vision/vision_config.h"

namespace eg::mmproj_detail {

inline const std::string kG4Vision = "model.vision_tower.";
inline const std::string kG4EmbedVision = "model.embed_vision.";
inline const std::string kG4Audio = "model.audio_tower.";
inline const std::string kG4EmbedAudio = "model.embed_audio.";

enum class G4Transform { None, PatchPermute, Softplus, Squeeze, Scalar };
// Stored type: Matrix = the file's type (f32 / f16 / q8_0, q8_0 rows not a multiple of 32 as
// f16); F32 always; Patch = f16 in an f16 file, else f32 (MmprojModel.tensor_force_quant).
enum class G4Type { Matrix, F32, Patch };

struct G4Tensor {
  std::string gguf;
  std::string hf;                    // canonical prefix + suffix
  std::vector<int64_t> hf_shape;     // the checkpoint's (PyTorch order; [] = a scalar)
  std::vector<int64_t> gguf_shape;   // the stored tensor's (PyTorch order: ne reversed)
  G4Transform transform = G4Transform::None;
  G4Type type = G4Type::F32;
  bool optional = false;
};

namespace g4 {

inline void plain(std::vector<G4Tensor>& t, const std::string& g, const std::string& h, std::vector<int64_t> shape,
                  G4Type type, bool optional = false) {
  t.push_back({g, h, shape, shape, G4Transform::None, type, optional});
}

// A Gemma4ClippableLinear: its weight (".linear.weight" in the checkpoint) and its four bounds.
inline void clipped(std::vector<G4Tensor>& t, const std::string& g, const std::string& h, int64_t out, int64_t in) {
  plain(t, g + ".weight", h + ".linear.weight", {out, in}, G4Type::Matrix);
  for (const char* b : {"input_min", "input_max", "output_min", "output_max"})
    t.push_back({g + "." + b, h + "." + b, {}, {1}, G4Transform::Scalar, G4Type::F32, true});
}

}  // namespace g4

/// Vision tower + embed_vision (c.position_embedding_size: the x / y tables' length).
inline std::vector<G4Tensor> gemma4v_tensors(const vision::VisionConfig& c) {
  const int64_t Hv = c.hidden, I = c.intermediate, ps = c.patch_size, H = c.text_hidden;
  const int64_t q = static_cast<int64_t>(c.heads) * c.head_dim, kv = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  const int64_t d = c.head_dim, PS = c.position_embedding_size;
  const std::string& V = kG4Vision;
  std::vector<G4Tensor> t;
  t.push_back({"v.patch_embd.weight", V + "patch_embedder.input_proj.weight", {Hv, 3 * ps * ps}, {Hv, 3, ps, ps},
               G4Transform::PatchPermute, G4Type::Patch, false});
  g4::plain(t, "v.position_embd.weight", V + "patch_embedder.position_embedding_table", {2, PS, Hv}, G4Type::F32);
  for (int i = 0; i < c.layers; ++i) {
    const std::string g = "v.blk." + std::to_string(i) + ".";
    const std::string h = V + "encoder.layers." + std::to_string(i) + ".";
    g4::clipped(t, g + "attn_q", h + "self_attn.q_proj", q, Hv);
    g4::clipped(t, g + "attn_k", h + "self_attn.k_proj", kv, Hv);
    g4::clipped(t, g + "attn_v", h + "self_attn.v_proj", kv, Hv);
    g4::clipped(t, g + "attn_out", h + "self_attn.o_proj", Hv, q);
    g4::clipped(t, g + "ffn_gate", h + "mlp.gate_proj", I, Hv);
    g4::clipped(t, g + "ffn_up", h + "mlp.up_proj", I, Hv);
    g4::clipped(t, g + "ffn_down", h + "mlp.down_proj", Hv, I);
    g4::plain(t, g + "ln1.weight", h + "input_layernorm.weight", {Hv}, G4Type::F32);
    g4::plain(t, g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", {d}, G4Type::F32);
    g4::plain(t, g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", {d}, G4Type::F32);
    g4::plain(t, g + "attn_post_norm.weight", h + "post_attention_layernorm.weight", {Hv}, G4Type::F32);
    g4::plain(t, g + "ln2.weight", h + "pre_feedforward_layernorm.weight", {Hv}, G4Type::F32);
    g4::plain(t, g + "ffn_post_norm.weight", h + "post_feedforward_layernorm.weight", {Hv}, G4Type::F32);
  }
  g4::plain(t, "v.std_bias", V + "std_bias", {Hv}, G4Type::F32, true);
  g4::plain(t, "v.std_scale", V + "std_scale", {Hv}, G4Type::F32, true);
  g4::plain(t, "mm.input_projection.weight", kG4EmbedVision + "embedding_projection.weight", {H, Hv}, G4Type::Matrix);
  return t;
}

/// Audio tower + embed_audio. `ffn` = the feed-forward width, `mel` = mel bins of the features.
inline std::vector<G4Tensor> gemma4a_tensors(const audio::AudioConfig& c, int64_t ffn, int64_t mel) {
  const int64_t Ha = c.hidden, C0 = c.conv_channels[0], C1 = c.conv_channels[1], D = c.hidden / c.heads;
  const int64_t P = c.output_dims, H = c.text_hidden, k = c.conv_kernel;
  const std::string& A = kG4Audio;
  const std::string S = A + "subsample_conv_projection.";
  std::vector<G4Tensor> t;
  // Everything under subsample_conv_projection and the depthwise conv is F32 (the converter's
  // tensor_force_quant matches ".conv" / "_conv" in the checkpoint name).
  g4::plain(t, "a.conv1d.0.weight", S + "layer0.conv.weight", {C0, 1, 3, 3}, G4Type::F32);
  g4::plain(t, "a.conv1d.0.norm.weight", S + "layer0.norm.weight", {C0}, G4Type::F32);
  g4::plain(t, "a.conv1d.1.weight", S + "layer1.conv.weight", {C1, C0, 3, 3}, G4Type::F32);
  g4::plain(t, "a.conv1d.1.norm.weight", S + "layer1.norm.weight", {C1}, G4Type::F32);
  g4::plain(t, "a.input_projection.weight", S + "input_proj_linear.weight", {Ha, C1 * (mel / 4)}, G4Type::F32);
  for (int i = 0; i < c.layers; ++i) {
    const std::string g = "a.blk." + std::to_string(i) + ".";
    const std::string h = A + "layers." + std::to_string(i) + ".";
    g4::clipped(t, g + "ffn_up", h + "feed_forward1.ffw_layer_1", ffn, Ha);
    g4::clipped(t, g + "ffn_down", h + "feed_forward1.ffw_layer_2", Ha, ffn);
    g4::clipped(t, g + "ffn_up_1", h + "feed_forward2.ffw_layer_1", ffn, Ha);
    g4::clipped(t, g + "ffn_down_1", h + "feed_forward2.ffw_layer_2", Ha, ffn);
    g4::plain(t, g + "ffn_norm.weight", h + "feed_forward1.pre_layer_norm.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "ffn_post_norm.weight", h + "feed_forward1.post_layer_norm.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "ffn_norm_1.weight", h + "feed_forward2.pre_layer_norm.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "ffn_post_norm_1.weight", h + "feed_forward2.post_layer_norm.weight", {Ha}, G4Type::F32);
    g4::clipped(t, g + "attn_q", h + "self_attn.q_proj", Ha, Ha);
    g4::clipped(t, g + "attn_k", h + "self_attn.k_proj", Ha, Ha);
    g4::clipped(t, g + "attn_v", h + "self_attn.v_proj", Ha, Ha);
    g4::clipped(t, g + "attn_out", h + "self_attn.post", Ha, Ha);
    g4::plain(t, g + "attn_k_rel.weight", h + "self_attn.relative_k_proj.weight", {Ha, Ha}, G4Type::Matrix);
    t.push_back({g + "per_dim_scale.weight", h + "self_attn.per_dim_scale", {D}, {D}, G4Transform::Softplus,
                 G4Type::F32, false});
    g4::plain(t, g + "attn_pre_norm.weight", h + "norm_pre_attn.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "attn_post_norm.weight", h + "norm_post_attn.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "ln2.weight", h + "norm_out.weight", {Ha}, G4Type::F32);
    // tensor_mapping.py maps lconv1d.pre_layer_norm to conv_norm and lconv1d.conv_norm to
    // norm_conv (the reverse of what the names suggest; clip.cpp loads them accordingly).
    g4::plain(t, g + "conv_norm.weight", h + "lconv1d.pre_layer_norm.weight", {Ha}, G4Type::F32);
    g4::plain(t, g + "norm_conv.weight", h + "lconv1d.conv_norm.weight", {Ha}, G4Type::F32);
    g4::clipped(t, g + "conv_pw1", h + "lconv1d.linear_start", 2 * Ha, Ha);
    g4::clipped(t, g + "conv_pw2", h + "lconv1d.linear_end", Ha, Ha);
    t.push_back({g + "conv_dw.weight", h + "lconv1d.depthwise_conv1d.weight", {Ha, 1, k}, {Ha, k}, G4Transform::Squeeze,
                 G4Type::F32, false});
  }
  g4::plain(t, "a.pre_encode.out.weight", A + "output_proj.weight", {P, Ha}, G4Type::Matrix);
  g4::plain(t, "a.pre_encode.out.bias", A + "output_proj.bias", {P}, G4Type::F32);
  g4::plain(t, "mm.a.input_projection.weight", kG4EmbedAudio + "embedding_projection.weight", {H, P}, G4Type::Matrix);
  return t;
}

}  // namespace eg::mmproj_detail
