#include "model/model_stats.h"

#include "core/error.h"
#include "model/weights.h"

namespace eg {

int64_t CheckpointTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& cfg, const std::string& prefix) {
  if (cfg.ple_dim < 0) throw Error("internal: PLE width unresolved");
  std::vector<CheckpointTensor> t;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, P = cfg.ple_dim;
  // Norm weights: Gemma 2/3 multiply by (1 + w), Gemma 4 by w; both give the identity scale.
  const TensorInit norm_init = cfg.norm_offset != 0.0f ? TensorInit::Zeros : TensorInit::Ones;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorRole role, TensorInit init) {
    t.push_back({prefix + name, std::move(shape), role, init});
  };
  auto mat = [&](const std::string& name, int64_t r, int64_t c) {
    add(name, {r, c}, TensorRole::Other, TensorInit::Random);
  };
  auto norm = [&](const std::string& name, int64_t n) { add(name, {n}, TensorRole::Other, norm_init); };

  add("embed_tokens.weight", {V, H}, TensorRole::Embedding, TensorInit::Random);
  norm("norm.weight", H);
  if (P > 0) {
    const int64_t LP = static_cast<int64_t>(cfg.n_layers) * P;
    add("embed_tokens_per_layer.weight", {cfg.ple_vocab, LP}, TensorRole::PleTable, TensorInit::Random);
    mat("per_layer_model_projection.weight", LP, H);
    norm("per_layer_projection_norm.weight", P);
  }
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& lc = cfg.layers[i];
    const std::string L = "layers." + std::to_string(i) + ".";
    const int64_t qd = static_cast<int64_t>(cfg.n_heads) * lc.head_dim;
    const int64_t kvd = static_cast<int64_t>(lc.n_kv_heads) * lc.head_dim;
    const int64_t I = lc.intermediate_size;
    const bool own_kv = lc.kv_source < 0;
    mat(L + "self_attn.q_proj.weight", qd, H);
    if (own_kv) mat(L + "self_attn.k_proj.weight", kvd, H);
    if (own_kv && !lc.k_eq_v) mat(L + "self_attn.v_proj.weight", kvd, H);
    mat(L + "self_attn.o_proj.weight", H, qd);
    if (cfg.qk_norm) {
      norm(L + "self_attn.q_norm.weight", lc.head_dim);
      if (own_kv) norm(L + "self_attn.k_norm.weight", lc.head_dim);
    }
    mat(L + "mlp.gate_proj.weight", I, H);
    mat(L + "mlp.up_proj.weight", I, H);
    mat(L + "mlp.down_proj.weight", H, I);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      norm(L + n + ".weight", H);
    if (cfg.layer_scalar) add(L + "layer_scalar", {1}, TensorRole::Other, TensorInit::Ones);
    if (P > 0) {
      mat(L + "per_layer_input_gate.weight", P, H);
      mat(L + "per_layer_projection.weight", H, P);
      norm(L + "post_per_layer_input_norm.weight", H);
    }
    if (cfg.n_experts > 0) {
      const int64_t E = cfg.n_experts, Im = cfg.moe_intermediate_size;
      mat(L + "router.proj.weight", E, H);
      add(L + "router.scale", {H}, TensorRole::Other, TensorInit::Ones);
      add(L + "router.per_expert_scale", {E}, TensorRole::Other, TensorInit::Ones);
      add(L + "experts.gate_up_proj", {E, 2 * Im, H}, TensorRole::Experts, TensorInit::Random);
      add(L + "experts.down_proj", {E, H, Im}, TensorRole::Experts, TensorInit::Random);
      for (const char* n : {"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                            "post_feedforward_layernorm_2"})
        norm(L + n + ".weight", H);
    }
  }
  return t;
}

ModelStats compute_model_stats(const ModelConfig& cfg_in, const TensorStore* store) {
  ModelConfig cfg = cfg_in;
  if (cfg.ple_dim < 0) {
    if (store) resolve_config_from_tensors(cfg, *store);
    else cfg.ple_dim = 0;  // key absent and no tensors to tell: no PLE
  }
  ModelStats s;
  std::string prefix = "model.";
  if (store) {
    try {
      prefix = find_decoder_prefix(*store);
    } catch (const Error&) {
      // no embedding tensor: every tensor is reported missing below
    }
  }
  const std::vector<CheckpointTensor> tensors = checkpoint_tensors(cfg, prefix);
  ParamCounts& p = s.params;
  int64_t inactive = 0, bytes_ckpt = 0;
  bool all_known = store != nullptr;
  for (const CheckpointTensor& t : tensors) {
    const int64_t n = t.numel();
    int64_t streamed = 0;  // parameters of this tensor read per token (LM head added below)
    switch (t.role) {
      case TensorRole::Embedding: p.embedding += n; break;
      case TensorRole::PleTable: p.ple_table += n; break;
      case TensorRole::Experts:
        p.blocks += n;
        streamed = n / cfg.n_experts * cfg.top_k_experts;
        inactive += n - streamed;
        break;
      case TensorRole::Other:
        p.blocks += n;
        streamed = n;
        break;
    }
    p.streamed_without_head += streamed;
    if (t.role == TensorRole::Embedding) streamed = n;  // the tied LM head streams all of E
    const TensorInfo* ti = store ? store->find(t.name) : nullptr;
    if (ti) {
      s.decoder_disk_bytes += static_cast<int64_t>(ti->nbytes);
      // Stored bytes of the streamed elements (block-quantized types: a whole number of rows).
      const int64_t numel = ti->numel();
      bytes_ckpt += numel > 0 ? static_cast<int64_t>(static_cast<double>(ti->nbytes) * streamed / numel) : 0;
    } else {
      all_known = false;
      if (store) s.missing_tensors.push_back(t.name);
    }
  }
  p.total = p.embedding + p.ple_table + p.blocks;
  p.active = p.total - inactive;
  p.lm_head = p.embedding;
  p.streamed = p.streamed_without_head + p.lm_head;
  s.streamed_bytes_bf16 = 2 * p.streamed;
  s.checkpoint_dtypes_known = all_known;
  s.streamed_bytes_checkpoint = all_known ? bytes_ckpt : 0;

  if (store) {
    s.have_weights = true;
    for (const std::string& name : store->names()) {
      const TensorInfo* ti = store->find(name);
      s.disk_bytes_by_dtype[dtype_name(ti->dtype)] += static_cast<int64_t>(ti->nbytes);
      s.disk_bytes += static_cast<int64_t>(ti->nbytes);
      ++s.disk_tensors;
    }
  }

  s.kv_bytes16_per_layer.assign(cfg.n_layers, 0);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const LayerConfig& l = cfg.layers[i];
    KVTypeStats& k = s.kv_by_type[l.type];
    ++k.layers;
    if (l.kv_source >= 0) {
      ++k.shared_layers;
      continue;
    }
    ++k.kv_layers;
    // K and V are both stored, also on K=V layers (V is v-normed and un-rotated, K is not).
    const int64_t elems = 2 * static_cast<int64_t>(l.n_kv_heads) * l.head_dim;
    s.kv_bytes16_per_layer[i] = 2 * elems;
    k.bytes16 += 2 * elems;
    k.bytes32 += 4 * elems;
    s.kv_bytes16 += 2 * elems;
    s.kv_bytes32 += 4 * elems;
  }
  return s;
}

std::string layer_pattern_string(const ModelConfig& cfg) {
  std::string s;
  for (const LayerConfig& l : cfg.layers) s += l.type == LayerType::Sliding ? 'S' : 'F';
  const size_t n = s.size();
  for (size_t p = 1; 2 * p <= n; ++p) {
    bool periodic = true;
    for (size_t i = p; i < n && periodic; ++i) periodic = s[i] == s[i % p];
    if (!periodic) continue;
    std::string out;
    out.reserve(p + 16 + n % p);
    out += '(';
    out.append(s, 0, p);
    out += ")x";
    out += std::to_string(n / p);
    if (n % p) {
      out += ' ';
      out.append(s, n - n % p, n % p);
    }
    return out;
  }
  return s;
}

}  // namespace eg
