#include "model/weights.h"

#include <set>

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

}  // namespace

ModelWeights bind_weights(TensorStore store, const ModelConfig& cfg) {
  ModelWeights w;
  w.store = std::move(store);
  const TensorStore& st = w.store;

  static const char* kPrefixes[] = {"model.", "language_model.model.", "model.language_model."};
  for (const char* p : kPrefixes) {
    if (st.find(std::string(p) + "embed_tokens.weight")) {
      w.prefix = p;
      break;
    }
  }
  if (w.prefix.empty())
    throw Error("checkpoint has no embedding tensor (looked for model.embed_tokens.weight, "
                "language_model.model.embed_tokens.weight, model.language_model.embed_tokens.weight)");
  const std::string& P = w.prefix;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;

  w.embed = matrix(st, P + "embed_tokens.weight", V, H);
  w.final_norm = norm(st, P + "norm.weight", H);
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
    lw.q = matrix(st, L + "self_attn.q_proj.weight", qd, H);
    lw.k = matrix(st, L + "self_attn.k_proj.weight", kvd, H);
    lw.v = matrix(st, L + "self_attn.v_proj.weight", kvd, H);
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
      lw.k_norm = norm(st, L + "self_attn.k_norm.weight", lc.head_dim);
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
