// llama.cpp tensor names <-> Hugging Face names, and a TensorStore over a GGUF file
// (llama.cpp src/llama-arch.cpp LLM_TENSOR_NAMES; gemma-architectures.md §1.3, §2.3, §3.4).
#include <cstdlib>

#include "core/error.h"
#include "model/gguf_model.h"
#include "model/model.h"

namespace eg {

namespace {

struct NamePair {
  const char* gguf;
  const char* hf;
};

const NamePair kGlobal[] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"output_norm.weight", "norm.weight"},
    {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
    {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
    {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
};

const NamePair kLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"layer_output_scale.weight", "layer_scalar"},
    {"inp_gate.weight", "per_layer_input_gate.weight"},
    {"proj.weight", "per_layer_projection.weight"},
    {"post_norm.weight", "post_per_layer_input_norm.weight"},
    {"ffn_gate_inp.weight", "router.proj.weight"},
    {"ffn_gate_inp.scale", "router.scale"},
    {"ffn_down_exps.scale", "router.per_expert_scale"},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
    {"ffn_down_exps.weight", "experts.down_proj"},
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
};

/// Splits "<prefix><N>.<rest>" into N and rest; false when it does not have that form.
bool split_layer(const std::string& name, const std::string& prefix, int* layer, std::string* rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && j - i < 6 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.' || (name[i] == '0' && j - i > 1)) return false;
  *layer = std::atoi(name.substr(i, j - i).c_str());
  *rest = name.substr(j + 1);
  return true;
}

}  // namespace

std::string gguf_to_hf_name(const std::string& n) {
  for (const NamePair& p : kGlobal)
    if (n == p.gguf) return std::string("model.") + p.hf;
  int layer = 0;
  std::string rest;
  if (!split_layer(n, "blk.", &layer, &rest)) return "";
  for (const NamePair& p : kLayer)
    if (rest == p.gguf) return "model.layers." + std::to_string(layer) + "." + p.hf;
  return "";
}

std::string hf_to_gguf_name(const std::string& n) {
  for (const NamePair& p : kGlobal)
    if (n == p.hf) return p.gguf;
  int layer = 0;
  std::string rest;
  if (!split_layer(n, "layers.", &layer, &rest)) return "";
  for (const NamePair& p : kLayer)
    if (rest == p.hf) return "blk." + std::to_string(layer) + "." + p.gguf;
  return "";
}

TensorStore gguf_tensor_store(const std::shared_ptr<GGUFFile>& g) {
  TensorStore st;
  for (const GGUFTensor& t : g->tensors()) {
    if (t.name == "rope_freqs.weight") continue;  // folded into the config (rope_pairs)
    std::string hf = gguf_to_hf_name(t.name);
    TensorInfo info;
    info.name = hf.empty() ? t.name : hf;
    info.dtype = t.dtype;
    info.shape = t.shape();
    info.data = t.data;
    info.nbytes = t.nbytes;
    st.add_external(std::move(info), g);
  }
  return st;
}

std::unique_ptr<Model> Model::load_gguf(const std::string& path) {
  std::shared_ptr<GGUFFile> g = GGUFFile::open(path);
  ModelConfig cfg = gguf_model_config(*g);
  try {
    return std::make_unique<Model>(std::move(cfg), gguf_tensor_store(g));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace eg
