// The tensors of a Gemma 3 mmproj file (model/mmproj.h): llama.cpp name, the Hugging Face name
// the SigLIP tower binds (canonical prefixes "vision_tower.vision_model." and
// "multi_modal_projector."), and the PyTorch-order shape the vision config implies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vision/vision_config.h"

namespace eg::mmproj_detail {

inline const std::string kVisionPrefix = "vision_tower.vision_model.";
inline const std::string kProjPrefix = "multi_modal_projector.";

struct MmprojTensor {
  std::string gguf;
  std::string hf;  // canonical prefix + suffix
  std::vector<int64_t> shape;
  bool layer_matrix = false;  // v.blk.N.* 2-D weight: may be quantized
};

inline std::vector<MmprojTensor> gemma3_tensors(const vision::VisionConfig& c) {
  const int64_t Hv = c.hidden, I = c.intermediate, ps = c.patch_size, H = c.text_hidden;
  const int64_t side = c.image_size / ps;
  std::vector<MmprojTensor> t;
  const std::string& V = kVisionPrefix;
  t.push_back({"v.patch_embd.weight", V + "embeddings.patch_embedding.weight", {Hv, 3, ps, ps}});
  t.push_back({"v.patch_embd.bias", V + "embeddings.patch_embedding.bias", {Hv}});
  t.push_back({"v.position_embd.weight", V + "embeddings.position_embedding.weight", {side * side, Hv}});
  struct L { const char *g, *h; int64_t r, c; };  // c = 0: a vector of r
  const L per_layer[] = {
      {"attn_q", "self_attn.q_proj", Hv, Hv}, {"attn_k", "self_attn.k_proj", Hv, Hv},
      {"attn_v", "self_attn.v_proj", Hv, Hv}, {"attn_out", "self_attn.out_proj", Hv, Hv},
      {"ffn_up", "mlp.fc1", I, Hv},           {"ffn_down", "mlp.fc2", Hv, I},
  };
  for (int i = 0; i < c.layers; ++i) {
    const std::string g = "v.blk." + std::to_string(i) + ".", h = V + "encoder.layers." + std::to_string(i) + ".";
    for (const L& l : per_layer) {
      t.push_back({g + l.g + ".weight", h + l.h + ".weight", {l.r, l.c}, true});
      t.push_back({g + l.g + ".bias", h + l.h + ".bias", {l.r}});
    }
    for (const char* n : {"1", "2"})
      for (const char* wb : {"weight", "bias"})
        t.push_back({g + "ln" + n + "." + wb, h + "layer_norm" + n + "." + wb, {Hv}});
  }
  t.push_back({"v.post_ln.weight", V + "post_layernorm.weight", {Hv}});
  t.push_back({"v.post_ln.bias", V + "post_layernorm.bias", {Hv}});
  t.push_back({"mm.input_projection.weight", kProjPrefix + "mm_input_projection_weight", {Hv, H}});
  t.push_back({"mm.soft_emb_norm.weight", kProjPrefix + "mm_soft_emb_norm.weight", {Hv}});
  return t;
}

}  // namespace eg::mmproj_detail
