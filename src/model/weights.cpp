#include "model/weights.h"

#include <set>

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace eg {

namespace {

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

const TensorInfo& need(const TensorStore& st, const std::string& name,
                       const std::vector<int64_t>& shape) {
  const TensorInfo* t = st.find(name);
  if (!t) throw Error("checkpoint is missing tensor '" + name + "'");
  if (t->shape != shape)
    throw Error(name + ": shape " + shape_string(t->shape) + ", expected " + shape_string(shape) +
                " from config.json");
  return *t;
}

ops::Weight matrix(const TensorStore& st, const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo& t = need(st, name, {rows, cols});
  return ops::Weight{t.data, t.dtype, rows, cols};
}

NormWeight norm(const TensorStore& st, const std::string& name, int64_t n) {
  const TensorInfo& t = need(st, name, {n});
  return NormWeight{t.data, t.dtype, n};
}

float scalar(const TensorStore& st, const std::string& name) {
  const TensorInfo& t = need(st, name, {1});
  float v = 0.0f;
  cpu::to_f32(t.data, t.dtype, 1, &v);
  return v;
}

}  // namespace

ops::Weight LayerWeights::expert_gate_up(int e, int64_t Im, int64_t H) const {
  const size_t stride = static_cast<size_t>(2 * Im) * dtype_row_bytes(experts_dtype, H);
  return ops::Weight{static_cast<const uint8_t*>(experts_gate_up) + e * stride, experts_dtype, 2 * Im, H};
}

ops::Weight LayerWeights::expert_down(int e, int64_t Im, int64_t H) const {
  const size_t stride = static_cast<size_t>(H) * dtype_row_bytes(experts_down_dtype, Im);
  return ops::Weight{static_cast<const uint8_t*>(experts_down) + e * stride, experts_down_dtype, H, Im};
}

std::string find_decoder_prefix(const TensorStore& st) {
  // "": Gemma3TextModel saved on its own (EmbeddingGemma: embed_tokens.weight, layers.N....).
  static const char* kPrefixes[] = {"model.", "language_model.model.", "model.language_model.", ""};
  for (const char* p : kPrefixes)
    if (st.find(std::string(p) + "embed_tokens.weight")) return p;
  throw Error("checkpoint has no embedding tensor (looked for model.embed_tokens.weight, "
              "language_model.model.embed_tokens.weight, model.language_model.embed_tokens.weight, "
              "embed_tokens.weight)");
}

void resolve_config_from_tensors(ModelConfig& cfg, const TensorStore& st) {
  if (cfg.ple_dim >= 0) return;
  const TensorInfo* t = st.find(find_decoder_prefix(st) + "embed_tokens_per_layer.weight");
  if (!t) {
    cfg.ple_dim = 0;
    return;
  }
  if (t->shape.size() != 2 || t->shape[1] % cfg.n_layers != 0)
    throw Error("embed_tokens_per_layer.weight: shape " + t->shape_str() + " is not [V, layers·P]");
  cfg.ple_dim = static_cast<int>(t->shape[1] / cfg.n_layers);
  cfg.ple_vocab = static_cast<int>(t->shape[0]);
}

ModelWeights bind_weights(TensorStore store, const ModelConfig& cfg) {
  ModelWeights w;
  w.store = std::move(store);
  const TensorStore& st = w.store;

  w.prefix = find_decoder_prefix(st);
  if (cfg.ple_dim < 0) throw Error("internal: PLE width unresolved (call resolve_config_from_tensors)");
  const std::string& P = w.prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;

  w.embed = matrix(st, P + "embed_tokens.weight", V, H);
  w.final_norm = norm(st, P + "norm.weight", H);
  const int64_t PL = cfg.ple_dim;
  if (PL > 0) {
    w.ple_embed = matrix(st, P + "embed_tokens_per_layer.weight", cfg.ple_vocab, cfg.n_layers * PL);
    w.ple_model_proj = matrix(st, P + "per_layer_model_projection.weight", cfg.n_layers * PL, H);
    w.ple_proj_norm = norm(st, P + "per_layer_projection_norm.weight", PL);
  }
  if (!cfg.tie_word_embeddings)
    throw Error("untied LM head (tie_word_embeddings=false) is not supported for Gemma");

  w.layers.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& lc = cfg.layers[i];
    const std::string L = P + "layers." + std::to_string(i) + ".";
    const int64_t qd = static_cast<int64_t>(cfg.n_heads) * lc.head_dim;
    const int64_t kvd = static_cast<int64_t>(lc.n_kv_heads) * lc.head_dim;
    const int64_t I = lc.intermediate_size;
    LayerWeights& lw = w.layers[i];
    const bool own_kv = lc.kv_source < 0;
    lw.q = matrix(st, L + "self_attn.q_proj.weight", qd, H);
    if (own_kv) lw.k = matrix(st, L + "self_attn.k_proj.weight", kvd, H);
    if (own_kv && !lc.k_eq_v) lw.v = matrix(st, L + "self_attn.v_proj.weight", kvd, H);
    lw.o = matrix(st, L + "self_attn.o_proj.weight", H, qd);
    lw.gate = matrix(st, L + "mlp.gate_proj.weight", I, H);
    lw.up = matrix(st, L + "mlp.up_proj.weight", I, H);
    lw.down = matrix(st, L + "mlp.down_proj.weight", H, I);
    lw.input_norm = norm(st, L + "input_layernorm.weight", H);
    lw.post_attn_norm = norm(st, L + "post_attention_layernorm.weight", H);
    lw.pre_ffw_norm = norm(st, L + "pre_feedforward_layernorm.weight", H);
    lw.post_ffw_norm = norm(st, L + "post_feedforward_layernorm.weight", H);
    if (cfg.qk_norm) {
      lw.q_norm = norm(st, L + "self_attn.q_norm.weight", lc.head_dim);
      if (own_kv) lw.k_norm = norm(st, L + "self_attn.k_norm.weight", lc.head_dim);
    }
    if (cfg.layer_scalar) lw.layer_scalar = scalar(st, L + "layer_scalar");
    if (PL > 0) {
      lw.ple_gate = matrix(st, L + "per_layer_input_gate.weight", PL, H);
      lw.ple_proj = matrix(st, L + "per_layer_projection.weight", H, PL);
      lw.ple_post_norm = norm(st, L + "post_per_layer_input_norm.weight", H);
    }
    if (cfg.n_experts > 0) {
      const int64_t E = cfg.n_experts, Im = cfg.moe_intermediate_size;
      lw.router = matrix(st, L + "router.proj.weight", E, H);
      lw.router_scale = norm(st, L + "router.scale", H);
      lw.per_expert_scale = norm(st, L + "router.per_expert_scale", E);
      const TensorInfo& gu = need(st, L + "experts.gate_up_proj", {E, 2 * Im, H});
      const TensorInfo& dn = need(st, L + "experts.down_proj", {E, H, Im});
      lw.experts_gate_up = gu.data;
      lw.experts_down = dn.data;
      lw.experts_dtype = gu.dtype;
      lw.experts_down_dtype = dn.dtype;
      lw.pre_ffw_norm_2 = norm(st, L + "pre_feedforward_layernorm_2.weight", H);
      lw.post_ffw_norm_1 = norm(st, L + "post_feedforward_layernorm_1.weight", H);
      lw.post_ffw_norm_2 = norm(st, L + "post_feedforward_layernorm_2.weight", H);
    }
  }

  // Report what we do not use (e.g. a vision tower of a multimodal checkpoint).
  // Named by the path components they share with the decoder prefix plus one more, so that
  // "model.vision_tower.x.y" is reported as "model.vision_tower." under "model.language_model.".
  std::set<std::string> ignored;
  for (const auto& name : st.names()) {
    if (name.rfind(P, 0) == 0 || name == "lm_head.weight") continue;
    size_t shared = 0;  // length of the common whole-component prefix of name and P
    for (size_t i = 0; i < P.size() && i < name.size() && P[i] == name[i]; ++i)
      if (P[i] == '.') shared = i + 1;
    const size_t dot = name.find('.', shared);
    ignored.insert(dot == std::string::npos ? name : name.substr(0, dot + 1));
  }
  w.ignored_prefixes.assign(ignored.begin(), ignored.end());
  return w;
}

}  // namespace eg
