// HF directory / GGUF -> quantized GGUF (see gguf_quantize.h).
#include "model/gguf_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/progress.h"
#include "embed/st_config.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/weights.h"
#include "quant/awq.h"
#include "quant/quant.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace eg {

namespace {

namespace fs = std::filesystem;
using KV = std::vector<std::pair<std::string, GGUFValue>>;

DType base_type(const std::string& type) {
  if (type == "q8_0") return DType::Q8_0;
  if (type == "q4_0") return DType::Q4_0;
  if (type == "q4_k" || type == "q4_k_m") return DType::Q4_K;
  if (type == "eg_q4_g128") return DType::EG_Q4_G128;
  if (type == "f16") return DType::F16;
  if (type == "f32") return DType::F32;
  throw Error("unknown quantization type '" + type + "' (supported: q8_0, q4_0, q4_k, q4_k_m, eg_q4_g128, f16, f32)");
}

bool contains(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int layer_of(const std::string& name) {
  int l = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &l) != 1) return -1;
  return l;
}

/// One tensor to write: its f32 values come from `data` (any dtype, converted row by row), or from
/// `f32` (generated / AWQ-modified), plus `add` (Gemma 2/3 norms: 1 + w).
struct Src {
  std::string name;
  std::vector<int64_t> ne;
  DType dtype = DType::F32;
  const uint8_t* data = nullptr;
  const std::vector<float>* f32 = nullptr;
  std::vector<float> owned;
  float add = 0.0f;
};

std::string arch_name(const ModelConfig& c) {
  if (c.bidirectional) return "gemma-embedding";  // EmbeddingGemma (llama.cpp LLM_ARCH_GEMMA_EMBEDDING)
  switch (c.family) {
    case ModelFamily::Gemma2: return "gemma2";
    case ModelFamily::Gemma3: return "gemma3";
    case ModelFamily::Gemma4: return "gemma4";
  }
  return "?";
}

/// Architecture metadata as llama.cpp's converter writes it (gguf_model.h; README of the fixtures).
void arch_metadata(const ModelConfig& c, KV& kv) {
  const std::string a = arch_name(c);
  auto k = [&](const char* s) { return a + "." + s; };
  const LayerConfig* full = nullptr;
  const LayerConfig* swa = nullptr;
  for (const LayerConfig& l : c.layers) {
    if (l.type == LayerType::Full) {
      if (!full) full = &l;
    } else if (!swa) {
      swa = &l;
    }
  }
  const LayerConfig& l0 = full ? *full : c.layers[0];
  kv.emplace_back(k("context_length"), GGUFValue::u32(c.max_position_embeddings));
  kv.emplace_back(k("embedding_length"), GGUFValue::u32(c.hidden_size));
  kv.emplace_back(k("block_count"), GGUFValue::u32(c.n_layers));
  auto per_layer = [&](const char* key, auto get) {
    std::vector<int64_t> v;
    for (const LayerConfig& l : c.layers) v.push_back(get(l));
    bool uniform = true;
    for (int64_t x : v) uniform &= x == v[0];
    if (uniform) kv.emplace_back(k(key), GGUFValue::u32(static_cast<uint32_t>(v[0])));
    else kv.emplace_back(k(key), GGUFValue::i32_array(std::move(v)));
  };
  per_layer("feed_forward_length", [](const LayerConfig& l) { return l.intermediate_size; });
  kv.emplace_back(k("attention.head_count"), GGUFValue::u32(c.n_heads));
  per_layer("attention.head_count_kv", [](const LayerConfig& l) { return l.n_kv_heads; });
  if (c.family != ModelFamily::Gemma2) {
    kv.emplace_back(k("rope.freq_base"), GGUFValue::f32(full ? full->rope_theta : 1e6f));
    kv.emplace_back(k("rope.freq_base_swa"), GGUFValue::f32(swa ? swa->rope_theta : 1e4f));
  }
  kv.emplace_back(k("attention.layer_norm_rms_epsilon"), GGUFValue::f32(c.rms_norm_eps));
  kv.emplace_back(k("attention.key_length"), GGUFValue::u32(l0.head_dim));
  kv.emplace_back(k("attention.value_length"), GGUFValue::u32(l0.head_dim));
  if (c.family == ModelFamily::Gemma2) kv.emplace_back(k("attn_logit_softcapping"), GGUFValue::f32(c.attn_softcap));
  if (c.final_softcap > 0) kv.emplace_back(k("final_logit_softcapping"), GGUFValue::f32(c.final_softcap));
  kv.emplace_back(k("attention.sliding_window"), GGUFValue::u32(c.sliding_window));
  if (c.family == ModelFamily::Gemma3 && full && full->rope_linear_factor != 1.0f) {
    kv.emplace_back(k("rope.scaling.type"), GGUFValue::str("linear"));
    kv.emplace_back(k("rope.scaling.factor"), GGUFValue::f32(full->rope_linear_factor));
  }
  if (c.bidirectional) {
    // llama.cpp reads the layer types of gemma-embedding as a period n: layer i is full iff
    // (i+1) % n == 0. The smallest period that reproduces ours.
    int period = 0;
    for (int p = 1; p <= c.n_layers && !period; ++p) {
      bool ok = true;
      for (int i = 0; i < c.n_layers; ++i) ok &= (c.layers[i].type == LayerType::Full) == ((i + 1) % p == 0);
      if (ok) period = p;
    }
    if (!period) throw Error("quantize: the embedding model's layer types are not periodic (llama.cpp cannot express them)");
    kv.emplace_back(k("attention.sliding_window_pattern"), GGUFValue::u32(period));
    kv.emplace_back(k("pooling_type"), GGUFValue::u32(1));  // mean (llama.cpp LLAMA_POOLING_TYPE_MEAN)
  }
  if (c.family == ModelFamily::Gemma4) {
    int shared = 0;
    for (const LayerConfig& l : c.layers) shared += l.kv_source >= 0;
    kv.emplace_back(k("attention.shared_kv_layers"), GGUFValue::u32(shared));
    kv.emplace_back(k("embedding_length_per_layer_input"), GGUFValue::u32(c.ple_dim > 0 ? c.ple_dim : 0));
    // Our own key (llama.cpp has none for it; gguf_config.cpp infers it for files without it).
    kv.emplace_back("edgegemma.use_bidirectional_attention",
                    GGUFValue::str(c.image_blocks_sliding_only ? "vision" : "none"));
    std::vector<int64_t> pat;
    for (const LayerConfig& l : c.layers) pat.push_back(l.type == LayerType::Sliding);
    kv.emplace_back(k("attention.sliding_window_pattern"), GGUFValue::bool_array(std::move(pat)));
    const int hs = swa ? swa->head_dim : l0.head_dim;
    kv.emplace_back(k("attention.key_length_swa"), GGUFValue::u32(hs));
    kv.emplace_back(k("attention.value_length_swa"), GGUFValue::u32(hs));
    if (c.n_experts > 0) {
      kv.emplace_back(k("expert_count"), GGUFValue::u32(c.n_experts));
      kv.emplace_back(k("expert_used_count"), GGUFValue::u32(c.top_k_experts));
      kv.emplace_back(k("expert_feed_forward_length"), GGUFValue::u32(c.moe_intermediate_size));
    }
    kv.emplace_back(k("rope.dimension_count"), GGUFValue::u32(l0.head_dim));
    kv.emplace_back(k("rope.dimension_count_swa"), GGUFValue::u32(hs));
  }
}

/// Compares what matters for the forward pass; "" when equal, else the first difference.
std::string config_difference(const ModelConfig& a, const ModelConfig& b) {
  auto fe = [](float x, float y) { return std::fabs(x - y) <= 1e-6f * std::max(1.0f, std::fabs(x)); };
#define EG_CMP(f) if (!(a.f == b.f)) return #f;
#define EG_CMPF(f) if (!fe(a.f, b.f)) return #f;
  EG_CMP(family) EG_CMP(bidirectional) EG_CMP(vocab_size) EG_CMP(hidden_size) EG_CMP(n_layers) EG_CMP(n_heads) EG_CMP(sliding_window)
  EG_CMPF(rms_norm_eps) EG_CMPF(query_scale) EG_CMPF(attn_softcap) EG_CMPF(final_softcap) EG_CMP(qk_norm) EG_CMP(v_norm)
  EG_CMP(layer_scalar) EG_CMP(ple_dim) EG_CMP(n_experts) EG_CMP(top_k_experts) EG_CMP(moe_intermediate_size)
  for (int i = 0; i < a.n_layers; ++i) {
    const LayerConfig &x = a.layers[i], &y = b.layers[i];
    const std::string L = "layer " + std::to_string(i) + " ";
    if (x.type != y.type) return L + "type";
    if (x.head_dim != y.head_dim) return L + "head_dim";
    if (x.n_kv_heads != y.n_kv_heads) return L + "n_kv_heads";
    if (!fe(x.rope_theta, y.rope_theta)) return L + "rope_theta";
    if (!fe(x.rope_linear_factor, y.rope_linear_factor)) return L + "rope scaling";
    if (x.rope_dims != y.rope_dims || x.rope_pairs != y.rope_pairs) return L + "rope dims";
    if (x.intermediate_size != y.intermediate_size) return L + "intermediate_size";
    if (x.kv_source != y.kv_source) return L + "kv_source";
    if (x.k_eq_v != y.k_eq_v) return L + "k_eq_v";
  }
#undef EG_CMP
#undef EG_CMPF
  return "";
}

quant::AwqSlot slot_of(const std::string& rest, bool* ok) {
  *ok = true;
  if (rest == "attn_q.weight") return quant::AwqSlot::Q;
  if (rest == "attn_k.weight") return quant::AwqSlot::K;
  if (rest == "attn_v.weight") return quant::AwqSlot::V;
  if (rest == "attn_output.weight") return quant::AwqSlot::O;
  if (rest == "ffn_gate.weight") return quant::AwqSlot::Gate;
  if (rest == "ffn_up.weight") return quant::AwqSlot::Up;
  if (rest == "ffn_down.weight") return quant::AwqSlot::Down;
  if (rest == "attn_norm.weight") return quant::AwqSlot::InputNorm;
  if (rest == "ffn_norm.weight") return quant::AwqSlot::PreFfwNorm;
  *ok = false;
  return quant::AwqSlot::Q;
}

const char* kSlotGguf[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                           "ffn_up.weight", "ffn_down.weight", "attn_norm.weight", "ffn_norm.weight"};

}  // namespace

uint32_t gguf_file_type(const std::string& type) {
  if (type == "f32") return 0;
  if (type == "f16") return 1;
  if (type == "q4_0") return 2;
  if (type == "q8_0") return 7;
  if (type == "q4_k") return 14;
  if (type == "q4_k_m") return 15;
  if (type == "eg_q4_g128") return 1024;
  base_type(type);  // throws
  return 0;
}

DType gguf_recipe_type(const std::string& type, const std::string& name, const std::vector<int64_t>& ne,
                       int n_layers, int n_experts, int attn_v_index, int n_attn_v, std::string* fallback) {
  const DType base = base_type(type);
  const bool quantizable = ends_with(name, "weight") && ne.size() >= 2 && !contains(name, "ffn_gate_inp") &&
                           !contains(name, "per_layer_model_proj") && name != "rope_freqs.weight";
  if (!quantizable) return DType::F32;
  if (!is_quantized(base)) return base;
  const bool km = type == "q4_k_m", ks = type == "q4_k";
  DType t = base;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight") {
    if (ne[0] % dtype_block_elems(t) != 0) t = DType::Q8_0;
    else if (t != DType::Q8_0) t = DType::Q6_K;
  } else if (contains(name, "attn_v.weight")) {
    if (km && use_more_bits(attn_v_index, n_attn_v)) t = DType::Q6_K;
    else if (ks && attn_v_index < 4) t = DType::Q5_K;
    if (n_experts == 8) t = DType::Q8_0;
  } else if (contains(name, "attn_k.weight")) {
    if (n_experts == 8) t = DType::Q8_0;
  } else if (contains(name, "ffn_down")) {
    const int l = layer_of(name);
    if (km && l >= 0 && use_more_bits(l, n_layers)) t = DType::Q6_K;
    else if (ks && l >= 0 && l < n_layers / 8) t = DType::Q5_K;
  } else if (contains(name, "attn_output.weight")) {
    if (n_experts == 8 && (km || ks)) t = DType::Q5_K;
  }
  if (ne[0] % dtype_block_elems(t) != 0) {
    DType f = DType::F16;
    switch (t) {
      case DType::Q4_K: f = DType::Q5_0; break;
      case DType::Q5_K: f = DType::Q5_1; break;
      case DType::Q6_K: f = DType::Q8_0; break;
      case DType::EG_Q4_G128: f = DType::Q4_0; break;
      default: break;
    }
    if (ne[0] % dtype_block_elems(f) != 0) f = DType::F16;
    if (fallback)
      *fallback = name + ": rows of " + std::to_string(ne[0]) + " are not a multiple of the " + dtype_name(t) +
                  " block (" + std::to_string(dtype_block_elems(t)) + "): " + dtype_name(f) + " instead";
    t = f;
  }
  return t;
}

/// An embedding model's sentence-transformers parts (embed/st_config.h) as llama.cpp's converter
/// writes them with --sentence-transformers-dense-modules: dense_2.weight / dense_3.weight and
/// their feat_in / feat_out keys; plus the prompts under edgegemma.embedding.* (llama.cpp ignores
/// them; our loader offers them as tasks).
void embedding_extras(const std::string& in, KV& kv, std::vector<Src>& srcs,
                      std::vector<std::unique_ptr<TensorStore>>& stores) {
  const embed::StConfig st = embed::load_st_config(in);
  if (!st.normalize) throw Error("quantize: " + in + ": an embedding model without a Normalize module is not supported");
  if (st.dense.size() != 2 && !st.dense.empty())
    throw Error("quantize: " + in + ": llama.cpp's gemma-embedding holds exactly two Dense modules (dense_2, dense_3), this has " +
                std::to_string(st.dense.size()));
  for (size_t i = 0; i < st.dense.size(); ++i) {
    const embed::DenseSpec& d = st.dense[i];
    if (d.bias) throw Error("quantize: " + d.dir + ": Dense modules with a bias are not supported in GGUF");
    stores.push_back(std::make_unique<TensorStore>(TensorStore::open_file((fs::path(d.dir) / "model.safetensors").string())));
    const TensorInfo* t = stores.back()->find("linear.weight");
    if (!t || t->shape != std::vector<int64_t>{d.out, d.in}) throw Error("quantize: " + d.dir + ": missing or misshaped linear.weight");
    const std::string n = i == 0 ? "dense_2" : "dense_3";
    Src s;
    s.name = n + ".weight";
    s.ne = {d.in, d.out};
    s.dtype = t->dtype;
    s.data = t->data;
    srcs.push_back(std::move(s));
    kv.emplace_back("gemma-embedding." + n + "_feat_in", GGUFValue::u32(d.in));
    kv.emplace_back("gemma-embedding." + n + "_feat_out", GGUFValue::u32(d.out));
  }
  // tokenizer_config.json's add_bos_token / add_eos_token complete the post-processor (as
  // transformers and our folder loader do): the GGUF's flags say what the ids really start / end with.
  const fs::path tcp = fs::path(in) / "tokenizer_config.json";
  if (fs::exists(tcp)) {
    const nlohmann::json tc = nlohmann::json::parse(read_file(tcp.string()), nullptr, false);
    for (const char* flag : {"add_bos_token", "add_eos_token"})
      if (tc.is_object() && tc.contains(flag) && tc[flag].is_boolean() && tc[flag].get<bool>())
        for (auto& [key, value] : kv)
          if (key == std::string("tokenizer.ggml.") + flag) value = GGUFValue::boolean(true);
  }
  std::vector<std::string> names, texts;
  for (const embed::Prompt& p : st.prompts) {
    names.push_back(p.name);
    texts.push_back(p.prefix);
  }
  if (!names.empty()) {
    kv.emplace_back("edgegemma.embedding.prompt_names", GGUFValue::str_array(std::move(names)));
    kv.emplace_back("edgegemma.embedding.prompts", GGUFValue::str_array(std::move(texts)));
  }
  if (!st.default_prompt_name.empty())
    kv.emplace_back("edgegemma.embedding.default_prompt_name", GGUFValue::str(st.default_prompt_name));
}

GGUFQuantizeReport quantize_to_gguf(const std::string& in, const std::string& out, const GGUFQuantizeOptions& opt) {
  const DType base = base_type(opt.type);
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  if (fs::exists(out) && fs::exists(in) && fs::equivalent(in, out)) throw Error("quantize: output is the input file");
  // Never replace a file of the input model (e.g. -o DIR/model.safetensors): the atomic rename
  // would destroy the source while it is still mapped.
  if (fs::is_directory(in) && fs::exists(out)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(in, ec))
      if (e.path().extension() != ".gguf" && fs::equivalent(e.path(), out, ec)) throw Error("quantize: output " + out + " is a file of the input model");
  }
  if (fs::path(out).extension() != ".gguf") throw Error("quantize: the output must be a .gguf file: " + out);
  const bool from_gguf = fs::is_regular_file(in);
  std::shared_ptr<GGUFFile> g;
  std::unique_ptr<TensorStore> store;
  std::unique_ptr<Tokenizer> tok;
  ModelConfig cfg;
  KV kv;
  std::vector<Src> srcs;
  std::vector<std::unique_ptr<TensorStore>> dense_stores;  // an embedding model's Dense weights
  const std::string ftype_key = "general.file_type";
  if (from_gguf) {
    if (fs::path(in).extension() != ".gguf") throw Error(in + ": input must be a Hugging Face directory or a .gguf file");
    g = GGUFFile::open(in);
    cfg = gguf_model_config(*g);
    for (const auto& [k, v] : g->metadata()) {
      if (k == ftype_key || k == "general.quantization_version" || k == "general.alignment") continue;
      kv.emplace_back(k, v);
    }
    for (const GGUFTensor& t : g->tensors()) {
      Src s;
      s.name = t.name;
      s.ne = t.ne;
      s.dtype = t.dtype;
      s.data = t.data;
      srcs.push_back(std::move(s));
    }
  } else {
    cfg = load_hf_config(in);
    store = std::make_unique<TensorStore>(TensorStore::open_dir(in));
    resolve_config_from_tensors(cfg, *store);
    if (!fs::exists(fs::path(in) / "tokenizer.json")) throw Error("missing tokenizer.json in " + in);
    tok = std::make_unique<Tokenizer>(Tokenizer::load_dir(in));
    std::string name = fs::path(in).filename().string();
    if (name.empty()) name = fs::path(in).parent_path().filename().string();
    kv.emplace_back("general.architecture", GGUFValue::str(arch_name(cfg)));
    kv.emplace_back("general.type", GGUFValue::str("model"));
    kv.emplace_back("general.name", GGUFValue::str(name));
    arch_metadata(cfg, kv);
    tok->to_gguf_metadata(kv, cfg.family != ModelFamily::Gemma4);
    // The folder's chat template (chat_template.jinja wins over tokenizer_config.json's, as
    // load_chat_template and transformers), which the tokenizer alone does not see.
    bool has_template = false;
    for (const auto& [k, v] : kv) has_template |= k == "tokenizer.chat_template";
    try {
      const std::string tmpl = load_chat_template(in);
      if (has_template)
        for (auto& [k, v] : kv)
          if (k == "tokenizer.chat_template") v = GGUFValue::str(tmpl);
      if (!has_template) kv.emplace_back("tokenizer.chat_template", GGUFValue::str(tmpl));
    } catch (const Error&) {
      // no template: a base model
    }
    const std::string prefix = find_decoder_prefix(*store);
    // Gemma 4: rope_freqs for the proportional RoPE of full layers.
    if (cfg.family == ModelFamily::Gemma4) {
      for (const LayerConfig& l : cfg.layers)
        if (l.type == LayerType::Full) {
          Src s;
          s.name = "rope_freqs.weight";
          s.ne = {l.head_dim / 2};
          s.owned.assign(l.head_dim / 2, 1e30f);
          for (int i = 0; i < l.rope_pairs; ++i) s.owned[i] = 1.0f;
          srcs.push_back(std::move(s));
          break;
        }
    }
    if (cfg.bidirectional) embedding_extras(in, kv, srcs, dense_stores);
    size_t tower_tensors = 0;  // vision / audio towers: one summary line, not one per tensor
    for (const std::string& hf : store->names()) {
      if (hf.rfind(prefix, 0) != 0) {
        static const char* const kTowers[] = {"vision_tower.", "audio_tower.", "embed_vision.", "embed_audio.",
                                              "multi_modal_projector."};
        bool tower = false;
        for (const char* t : kTowers) tower = tower || hf.find(t) != std::string::npos;
        if (tower) ++tower_tensors;
        else if (hf != "lm_head.weight") log("skipping " + hf + " (not part of the text decoder)");
        continue;
      }
      const std::string rest = hf.substr(prefix.size());
      const std::string gname = hf_to_gguf_name(rest);
      if (gname.empty()) {
        log("skipping " + hf + " (no llama.cpp name)");
        continue;
      }
      const TensorInfo* t = store->find(hf);
      Src s;
      s.name = gname;
      s.ne.assign(t->shape.rbegin(), t->shape.rend());
      s.dtype = t->dtype;
      s.data = t->data;
      if (cfg.family != ModelFamily::Gemma4 && ends_with(rest, "norm.weight")) s.add = 1.0f;
      srcs.push_back(std::move(s));
    }
    if (tower_tensors > 0)
      log("skipping " + std::to_string(tower_tensors) +
          " tensors of the vision / audio towers (not part of the text decoder; quantize --mmproj writes them)");
  }
  // One token per embedding row, as llama.cpp's converter writes and its loader requires: Gemma 3
  // 1B's tokenizer has <image_soft_token> = 262144 beyond its 262144 rows, Gemma 3 4B's embedding
  // has 63 padding rows. Older files of ours (and other writers') are fixed when requantized.
  for (const Src& s : srcs) {
    if (s.name != "token_embd.weight" || s.ne.size() != 2) continue;
    const int64_t d = Tokenizer::fit_gguf_vocab(kv, s.ne[1]);
    if (d > 0)
      log("vocabulary: dropped " + std::to_string(d) + " token(s) with ids beyond the embedding's " +
          std::to_string(s.ne[1]) + " rows");
    else if (d < 0)
      log("vocabulary: padded with " + std::to_string(-d) + " [PAD] token(s) to the embedding's " +
          std::to_string(s.ne[1]) + " rows");
  }
  kv.emplace_back(ftype_key, GGUFValue::u32(gguf_file_type(opt.type)));
  kv.emplace_back("general.quantization_version", GGUFValue::u32(2));

  // Types.
  int n_attn_v = 0;
  for (const Src& s : srcs) n_attn_v += contains(s.name, "attn_v.weight");
  std::vector<std::pair<int, size_t>> v_order;  // (layer, index) of attn_v tensors
  for (size_t i = 0; i < srcs.size(); ++i)
    if (contains(srcs[i].name, "attn_v.weight")) v_order.emplace_back(layer_of(srcs[i].name), i);
  std::sort(v_order.begin(), v_order.end());
  std::vector<int> v_index(srcs.size(), 0);
  for (size_t k = 0; k < v_order.size(); ++k) v_index[v_order[k].second] = static_cast<int>(k);
  GGUFQuantizeReport rep;
  std::vector<GGUFTensorSpec> specs;
  for (size_t i = 0; i < srcs.size(); ++i) {
    std::string fb;
    const DType t = gguf_recipe_type(opt.type, srcs[i].name, srcs[i].ne, cfg.n_layers, cfg.n_experts, v_index[i], n_attn_v, &fb);
    if (!fb.empty()) {
      rep.fallbacks.push_back(fb);
      log("fallback: " + fb);
    }
    rep.tensor_types[srcs[i].name] = t;
    specs.push_back({srcs[i].name, t, srcs[i].ne});
  }

  // Activation-aware scaling: modified f32 tensors replace the originals.
  quant::AwqResult awq_res;
  if (opt.awq) {
    if (opt.calib_file.empty()) throw Error("--awq needs --calib FILE");
    std::unique_ptr<Model> model = from_gguf ? Model::load_gguf(in) : Model::load_dir(in);
    std::unique_ptr<Tokenizer> ctok = from_gguf ? std::make_unique<Tokenizer>(Tokenizer::from_gguf(*g))
                                                : std::make_unique<Tokenizer>(Tokenizer::load_dir(in));
    const std::vector<int32_t> calib = quant::awq_calibration_tokens(*ctok, read_file(opt.calib_file), opt.calib_tokens);
    quant::AwqOptions ao;
    ao.clip = opt.awq_clip;
    ao.target = is_quantized(base) ? base : DType::Q4_0;
    ao.target_for = [&](int layer, quant::AwqSlot slot) {
      const std::string n = "blk." + std::to_string(layer) + "." + kSlotGguf[static_cast<int>(slot)];
      auto it = rep.tensor_types.find(n);
      return it != rep.tensor_types.end() && is_quantized(it->second) ? it->second : ao.target;
    };
    ao.log = opt.log;
    ao.progress = opt.progress;
    awq_res = quant::awq(*model, calib, ao);
    log("awq: " + std::to_string(awq_res.tensors.size()) + " tensors rescaled on " +
        std::to_string(awq_res.calib_tokens) + " calibration tokens");
    for (Src& s : srcs) {
      const int l = layer_of(s.name);
      if (l < 0) continue;
      bool ok = false;
      const quant::AwqSlot slot = slot_of(s.name.substr(s.name.find('.', 4) + 1), &ok);
      if (!ok) continue;
      if (const quant::AwqTensor* t = awq_res.find(l, slot)) {
        s.f32 = &t->data;
        // Norm vectors come in the source model's convention; GGUF Gemma 2/3 stores 1 + w.
        const bool is_norm = slot == quant::AwqSlot::InputNorm || slot == quant::AwqSlot::PreFfwNorm;
        s.add = is_norm && cfg.family != ModelFamily::Gemma4 ? model->config().norm_offset : 0.0f;
      }
    }
  }

  // Write: rows are converted and quantized in parallel, a chunk at a time, then appended in order.
  GGUFWriter w(out, kv, specs);
  constexpr int64_t kChunkRows = 256;
  std::vector<uint8_t> chunk;
  int64_t total_bytes = 0, bytes_done = 0;
  for (const GGUFTensorSpec& sp : specs) total_bytes += static_cast<int64_t>(sp.nbytes());
  ProgressTask progress(opt.progress, "quantize", total_bytes, ProgressUnit::Bytes);
  for (size_t i = 0; i < srcs.size(); ++i) {
    const Src& s = srcs[i];
    const DType t = specs[i].dtype;
    const int64_t n0 = s.ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
    const std::vector<float>* whole = s.f32 ? s.f32 : (s.owned.empty() ? nullptr : &s.owned);
    if (whole && whole->size() != static_cast<size_t>(n0 * rows))
      throw Error("quantize: " + s.name + ": replacement data has the wrong size");
    const size_t src_row_bytes = dtype_row_bytes(s.dtype, n0);
    const size_t out_row_bytes = dtype_row_bytes(t, n0);
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
      const int64_t nr = std::min(kChunkRows, rows - r0);
      chunk.resize(static_cast<size_t>(nr) * out_row_bytes);
      try {
        cpu::parallel_for(nr, [&](int64_t k, int) {
          const int64_t r = r0 + k;
          std::vector<float> row(n0);
          if (whole) std::copy(whole->begin() + r * n0, whole->begin() + (r + 1) * n0, row.begin());
          else cpu::to_f32(s.data + r * src_row_bytes, s.dtype, static_cast<size_t>(n0), row.data());
          if (s.add != 0.0f)
            for (float& x : row) x += s.add;
          uint8_t* dst = chunk.data() + k * out_row_bytes;
          if (t == DType::F32) {
            std::memcpy(dst, row.data(), out_row_bytes);
          } else if (t == DType::F16) {
            for (int64_t e = 0; e < n0; ++e) {
              const uint16_t h = f32_to_f16(row[e]);
              std::memcpy(dst + 2 * e, &h, 2);
            }
          } else {
            quant::quantize_row(t, row.data(), n0, dst);
          }
        }, nr * n0 >= 65536 ? 0 : 1);
      } catch (const std::exception& e) {  // the pool rethrows a task's exception here
        throw Error("quantize: " + s.name + ": " + e.what());
      }
      w.append(chunk.data(), chunk.size());
      bytes_done += static_cast<int64_t>(chunk.size());
      progress.update(bytes_done, "tensor " + std::to_string(i + 1) + "/" + std::to_string(srcs.size()));
    }
  }
  w.finish();
  progress.finish();
  rep.bytes_written = fs::file_size(out);

  // Read back: the GGUF must describe the same model.
  try {
    auto back = GGUFFile::open(out);
    const std::string diff = config_difference(cfg, gguf_model_config(*back));
    if (!diff.empty())
      throw Error("the model cannot be expressed in llama.cpp's GGUF conventions (" + diff +
                  " differs when read back)");
  } catch (const Error& e) {
    std::error_code ec;
    fs::remove(out, ec);
    throw Error("quantize: " + out + ": " + e.what());
  }
  return rep;
}

}  // namespace eg
