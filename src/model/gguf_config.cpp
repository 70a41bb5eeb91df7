// GGUF metadata -> ModelConfig (conventions in model/gguf_model.h).
#include <cmath>

#include "core/error.h"
#include "model/config_parse.h"
#include "model/gguf_model.h"

namespace eg {

namespace {

struct Meta {
  const GGUFFile& g;
  std::string arch;
  [[noreturn]] void fail(const std::string& msg) const { throw Error(g.path() + ": " + msg); }
  std::string key(const char* k) const { return arch + "." + k; }
  int req_int(const char* k) const {
    const int64_t v = g.get_int(key(k));
    if (v <= 0 || v > (int64_t{1} << 30)) fail("metadata '" + key(k) + "' = " + std::to_string(v) + " is out of range");
    return static_cast<int>(v);
  }
  int opt_int(const char* k, int def) const { return g.find(key(k)) ? req_int(k) : def; }
  /// Scalar or per-layer array (n entries) of positive integers.
  std::vector<int> per_layer(const char* k, int n, int def, bool required) const {
    const GGUFValue* v = g.find(key(k));
    if (!v) {
      if (required) fail("missing metadata key '" + key(k) + "'");
      return std::vector<int>(n, def);
    }
    if (!v->is_array()) return std::vector<int>(n, req_int(k));
    if (v->ints.size() != static_cast<size_t>(n) || v->elem == GGUFType::BOOL)
      fail("metadata '" + key(k) + "' must be an integer or " + std::to_string(n) + " integers (one per layer)");
    std::vector<int> out(n);
    for (int i = 0; i < n; ++i) {
      if (v->ints[i] <= 0 || v->ints[i] > (int64_t{1} << 30))
        fail("metadata '" + key(k) + "'[" + std::to_string(i) + "] = " + std::to_string(v->ints[i]) + " is out of range");
      out[i] = static_cast<int>(v->ints[i]);
    }
    return out;
  }
  float num(const char* k, double def) const { return static_cast<float>(g.get_float(key(k), def)); }
};

/// Rotated pair count from rope_freqs.weight: leading 1.0 entries, then entries >= 1e20 (frequency
/// divided by ~infinity = 0, i.e. unrotated).
int rope_pairs_from_freqs(const Meta& m, int full_head_dim) {
  const GGUFTensor* t = m.g.find_tensor("rope_freqs.weight");
  if (!t) return full_head_dim / 2;
  if (t->dtype != DType::F32 || t->ne.size() != 1 || t->ne[0] != full_head_dim / 2)
    m.fail("rope_freqs.weight must be F32 with " + std::to_string(full_head_dim / 2) + " entries");
  const float* f = reinterpret_cast<const float*>(t->data);
  int p = 0;
  while (p < t->ne[0] && f[p] == 1.0f) ++p;
  for (int64_t i = p; i < t->ne[0]; ++i)
    if (!(f[i] >= 1e20f))
      m.fail("rope_freqs.weight[" + std::to_string(i) + "] = " + std::to_string(f[i]) +
             ": only 1.0 (rotated) then >= 1e20 (unrotated) entries are supported");
  return p;
}

}  // namespace

ModelConfig gguf_model_config(const GGUFFile& g) {
  Meta m{g, g.get_string("general.architecture")};
  ModelConfig c;
  if (m.arch == "gemma2") c.family = ModelFamily::Gemma2;
  else if (m.arch == "gemma3" || m.arch == "gemma-embedding") c.family = ModelFamily::Gemma3;
  else if (m.arch == "gemma4") c.family = ModelFamily::Gemma4;
  else if (m.arch == "gemma")
    m.fail("Gemma 1 (architecture 'gemma') is not supported: it has no post-attention/post-FFN norms");
  else
    m.fail("unsupported general.architecture '" + m.arch + "' (supported: gemma2, gemma3, gemma4, gemma-embedding)");
  c.model_type = m.arch + " (gguf)";

  const GGUFTensor* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) m.fail("missing 2-D tensor 'token_embd.weight'");
  c.hidden_size = m.req_int("embedding_length");
  if (emb->ne[0] != c.hidden_size)
    m.fail("token_embd.weight has rows of " + std::to_string(emb->ne[0]) + ", embedding_length is " +
           std::to_string(c.hidden_size));
  c.vocab_size = static_cast<int>(emb->ne[1]);
  c.n_layers = m.req_int("block_count");
  if (c.n_layers > 4096) m.fail("block_count is too large");
  const int L = c.n_layers;
  c.n_heads = m.req_int("attention.head_count");
  c.max_position_embeddings = m.opt_int("context_length", 8192);
  c.rms_norm_eps = m.num("attention.layer_norm_rms_epsilon", 1e-6);
  c.sliding_window = m.opt_int("attention.sliding_window", 4096);
  c.bos_token_id = static_cast<int>(g.get_int("tokenizer.ggml.bos_token_id", 2));
  c.pad_token_id = static_cast<int>(g.get_int("tokenizer.ggml.padding_token_id", 0));
  c.eos_token_ids = {static_cast<int>(g.get_int("tokenizer.ggml.eos_token_id", 1))};
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  c.norm_offset = 0.0f;  // Gemma 2/3 norms are stored as 1 + w; Gemma 4 has plain w
  c.final_softcap = m.num("final_logit_softcapping", 0.0);

  std::vector<int> kvh = m.per_layer("attention.head_count_kv", L, c.n_heads, false);
  std::vector<int> ffn = m.per_layer("feed_forward_length", L, 0, true);
  const int hd = m.opt_int("attention.key_length", c.hidden_size / c.n_heads);
  if (m.opt_int("attention.value_length", hd) != hd) m.fail("key_length != value_length is not supported");

  c.layers.resize(L);
  if (c.family != ModelFamily::Gemma4) {
    c.qk_norm = c.family == ModelFamily::Gemma3;
    c.attn_softcap = m.num("attn_logit_softcapping", 0.0);
    const bool is_27b = (c.family == ModelFamily::Gemma2 && L == 46) || (c.family == ModelFamily::Gemma3 && L == 62);
    c.query_scale = 1.0f / std::sqrt(static_cast<float>(is_27b ? c.hidden_size / c.n_heads : hd));
    cfgparse::RopeSpec full, local;
    if (c.family == ModelFamily::Gemma2) {
      full.theta = local.theta = m.num("rope.freq_base", 10000.0);
    } else {
      full.theta = m.num("rope.freq_base", 1000000.0);
      local.theta = m.num("rope.freq_base_swa", 10000.0);
      const std::string st = g.get_string(m.key("rope.scaling.type"), "none");
      if (st == "linear") full.linear_factor = m.num("rope.scaling.factor", 1.0);
      else if (st != "none") m.fail("unsupported rope.scaling.type '" + st + "'");
    }
    if (!(full.theta > 0) || !(local.theta > 0) || !(full.linear_factor > 0)) m.fail("rope parameters must be > 0");
    // gemma-embedding (EmbeddingGemma, llama.cpp LLM_ARCH_GEMMA_EMBEDDING): bidirectional, and
    // attention.sliding_window_pattern is a period n (layer i full iff (i+1) % n == 0; 6 when absent).
    int period = 6;
    if (m.arch == "gemma-embedding") {
      c.bidirectional = true;
      if (const GGUFValue* p = g.find(m.key("attention.sliding_window_pattern"))) {
        if (p->is_array()) m.fail("metadata '" + m.key("attention.sliding_window_pattern") + "' must be one integer");
        period = m.req_int("attention.sliding_window_pattern");
      }
    }
    for (int i = 0; i < L; ++i) {
      LayerConfig& l = c.layers[i];
      l.type = c.family == ModelFamily::Gemma2 ? (i % 2 == 1 ? LayerType::Full : LayerType::Sliding)
                                               : ((i + 1) % period == 0 ? LayerType::Full : LayerType::Sliding);
      l.head_dim = hd;
      l.n_kv_heads = kvh[i];
      l.intermediate_size = ffn[i];
      cfgparse::apply_rope(l.type == LayerType::Full ? full : local, l);
    }
  } else {
    c.query_scale = 1.0f;
    c.qk_norm = true;
    c.v_norm = true;
    c.layer_scalar = true;
    const int hd_swa = m.opt_int("attention.key_length_swa", hd);
    if (m.opt_int("attention.value_length_swa", hd_swa) != hd_swa)
      m.fail("key_length_swa != value_length_swa is not supported");
    std::vector<LayerType> types(L, LayerType::Full);
    if (const GGUFValue* p = g.find(m.key("attention.sliding_window_pattern"))) {
      if (!p->is_array() || p->ints.size() != static_cast<size_t>(L))
        m.fail("metadata '" + m.key("attention.sliding_window_pattern") + "' must hold one bool per layer");
      for (int i = 0; i < L; ++i) types[i] = p->ints[i] ? LayerType::Sliding : LayerType::Full;
    } else {
      for (int i = 0; i < L; ++i) types[i] = (i + 1) % 6 == 0 ? LayerType::Full : LayerType::Sliding;
    }
    cfgparse::RopeSpec full, local;
    full.theta = m.num("rope.freq_base", 1000000.0);
    local.theta = m.num("rope.freq_base_swa", 10000.0);
    if (!(full.theta > 0) || !(local.theta > 0)) m.fail("rope parameters must be > 0");
    if (m.opt_int("rope.dimension_count", hd) != hd || m.opt_int("rope.dimension_count_swa", hd_swa) != hd_swa)
      m.fail("partial rope.dimension_count is not supported (must equal the head dim)");
    const int full_pairs = rope_pairs_from_freqs(m, hd);
    const int n_shared = static_cast<int>(g.get_int(m.key("attention.shared_kv_layers"), 0));
    if (n_shared < 0 || n_shared >= L) m.fail("attention.shared_kv_layers must be in 0..block_count-1");
    const int first_shared = L - n_shared;
    for (int i = 0; i < L; ++i) {
      LayerConfig& l = c.layers[i];
      l.type = types[i];
      l.head_dim = l.type == LayerType::Full ? hd : hd_swa;
      l.n_kv_heads = kvh[i];
      l.intermediate_size = ffn[i];
      cfgparse::apply_rope(l.type == LayerType::Full ? full : local, l);
      if (l.type == LayerType::Full) l.rope_pairs = full_pairs;
      if (l.head_dim % 2 || c.n_heads % l.n_kv_heads)
        m.fail("layer " + std::to_string(i) + ": bad head dim / head_count_kv");
      const std::string blk = "blk." + std::to_string(i) + ".";
      if (i >= first_shared) {
        if (const std::string e = cfgparse::assign_kv_source(c, l, i, first_shared, types); !e.empty()) m.fail(e);
      } else {
        l.k_eq_v = l.type == LayerType::Full && g.find_tensor(blk + "attn_v.weight") == nullptr &&
                   g.find_tensor(blk + "attn_k.weight") != nullptr;
      }
    }
    c.ple_dim = static_cast<int>(g.get_int(m.key("embedding_length_per_layer_input"), 0));
    if (c.ple_dim < 0) m.fail("embedding_length_per_layer_input must be >= 0");
    if (c.ple_dim > 0) {
      const GGUFTensor* pe = g.find_tensor("per_layer_token_embd.weight");
      if (!pe || pe->ne.size() != 2) m.fail("missing 2-D tensor 'per_layer_token_embd.weight'");
      c.ple_vocab = static_cast<int>(pe->ne[1]);
    }
    // Gemma 4 26B-A4B / 31B set use_bidirectional_attention = "vision" (their image blocks attend
    // both ways on sliding layers: config.h). Our quantize writes it as
    // edgegemma.use_bidirectional_attention; a GGUF without that key (llama.cpp's converter has
    // none) gets the released models' rule: the checkpoints without per-layer embeddings (26B,
    // 31B) use "vision", the E2B/E4B ones (with them) are causal.
    const std::string bidi = g.get_string("edgegemma.use_bidirectional_attention", c.ple_dim > 0 ? "none" : "vision");
    if (bidi != "none" && bidi != "vision")
      m.fail("edgegemma.use_bidirectional_attention must be 'none' or 'vision', not '" + bidi + "'");
    c.image_blocks_sliding_only = bidi == "vision";
    c.n_experts = static_cast<int>(g.get_int(m.key("expert_count"), 0));
    if (c.n_experts > 0) {
      c.top_k_experts = m.req_int("expert_used_count");
      c.moe_intermediate_size = m.req_int("expert_feed_forward_length");
      if (c.top_k_experts > c.n_experts) m.fail("expert_used_count > expert_count");
    } else if (c.n_experts < 0) {
      m.fail("expert_count must be >= 0");
    }
  }
  for (const LayerConfig& l : c.layers)
    if (l.head_dim <= 0 || l.n_kv_heads <= 0 || l.intermediate_size <= 0 || c.n_heads % l.n_kv_heads)
      m.fail("inconsistent head/FFN sizes in the metadata");
  return c;
}

}  // namespace eg
