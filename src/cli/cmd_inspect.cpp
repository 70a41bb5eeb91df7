// `edgegemma inspect`: the architecture and size arithmetic of a checkpoint, from its config.json
// and safetensors headers only (no weight is read, so it is instant even for 31B): layers and
// their types, attention geometry and RoPE per layer type, KV sharing, PLE, MoE; parameter
// counts; weight bytes on disk by dtype; bytes read per generated token; KV-cache bytes per token.
// The arithmetic lives in model/model_stats.h.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "model/known_models.h"
#include "model/model_stats.h"
#include "model/weights.h"

namespace eg::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct InspectArgs {
  std::string model_dir;
  std::string like;
  int layers = 0;
  bool json = false;
};

std::string commas(int64_t v) {
  std::string d = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

std::string theta_str(float t) {
  char buf[32];
  if (t >= 1e5f) std::snprintf(buf, sizeof buf, "%.0e", static_cast<double>(t));
  else std::snprintf(buf, sizeof buf, "%.0f", static_cast<double>(t));
  return buf;
}

const LayerConfig* first_of(const ModelConfig& c, LayerType t) {
  for (const auto& l : c.layers)
    if (l.type == t) return &l;
  return nullptr;
}

// Distinct values of f over the layers of type t, ascending.
template <class F>
std::vector<int> distinct(const ModelConfig& c, LayerType t, F f) {
  std::set<int> s;
  for (const auto& l : c.layers)
    if (l.type == t) s.insert(f(l));
  return {s.begin(), s.end()};
}

std::string join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

json one_or_list(const std::vector<int>& v) { return v.size() == 1 ? json(v[0]) : json(v); }

std::string rope_str(const LayerConfig& l) {
  std::string s = "RoPE theta " + theta_str(l.rope_theta);
  if (l.rope_linear_factor != 1.0f) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ", linear x%g", static_cast<double>(l.rope_linear_factor));
    s += buf;
  }
  if (l.rope_pairs < l.rope_dims / 2)
    s += ", proportional: " + std::to_string(l.rope_pairs) + " of " + std::to_string(l.rope_dims / 2) + " pairs rotate";
  return s;
}

// First shared layer and the source per type ({} when no KV sharing).
struct Sharing {
  int first = -1, count = 0;
  std::map<LayerType, int> source;
};
Sharing sharing_of(const ModelConfig& c) {
  Sharing s;
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerConfig& l = c.layers[i];
    if (l.kv_source < 0) continue;
    if (s.first < 0) s.first = i;
    ++s.count;
    s.source[l.type] = l.kv_source;
  }
  return s;
}

json build_json(const std::string& origin, const ModelConfig& c, const ModelStats& st) {
  json j;
  j["path"] = origin;
  j["family"] = family_name(c.family);
  j["model_type"] = c.model_type;
  j["multimodal_wrapper"] = c.multimodal_wrapper;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["sliding_window"] = c.sliding_window;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["final_logit_softcapping"] = c.final_softcap;
  j["attn_logit_softcapping"] = c.attn_softcap;
  j["layer_pattern"] = layer_pattern_string(c);
  json types = json::array(), full = json::array();
  for (int i = 0; i < c.n_layers; ++i) {
    types.push_back(layer_type_name(c.layers[i].type));
    if (c.layers[i].type == LayerType::Full) full.push_back(i);
  }
  j["layer_types"] = types;
  j["full_layers"] = full;
  json geo = json::object();
  for (LayerType t : {LayerType::Sliding, LayerType::Full}) {
    const LayerConfig* l = first_of(c, t);
    if (!l) continue;
    json g;
    g["layers"] = st.kv_by_type.at(t).layers;
    g["head_dim"] = one_or_list(distinct(c, t, [](const LayerConfig& x) { return x.head_dim; }));
    g["kv_heads"] = one_or_list(distinct(c, t, [](const LayerConfig& x) { return x.n_kv_heads; }));
    g["intermediate_size"] = one_or_list(distinct(c, t, [](const LayerConfig& x) { return x.intermediate_size; }));
    g["k_eq_v"] = l->k_eq_v;
    g["window"] = t == LayerType::Sliding ? json(c.sliding_window) : json(nullptr);
    g["rope"] = {{"theta", l->rope_theta},
                 {"linear_factor", l->rope_linear_factor},
                 {"pairs", l->rope_dims / 2},
                 {"rotated_pairs", l->rope_pairs},
                 {"proportional", l->rope_pairs < l->rope_dims / 2}};
    geo[layer_type_name(t)] = g;
  }
  j["layer_geometry"] = geo;
  const Sharing sh = sharing_of(c);
  if (sh.count > 0) {
    json src = json::object();
    for (const auto& [t, s] : sh.source) src[layer_type_name(t)] = s;
    json per_layer = json::array();
    for (const auto& l : c.layers) per_layer.push_back(l.kv_source);
    j["kv_sharing"] = {{"shared_layers", sh.count}, {"first_shared", sh.first}, {"sources", src},
                       {"kv_source_per_layer", per_layer}};
  } else {
    j["kv_sharing"] = nullptr;
  }
  j["ple"] = c.ple_dim > 0 ? json{{"dim", c.ple_dim}, {"vocab", c.ple_vocab}} : json(nullptr);
  j["moe"] = c.n_experts > 0 ? json{{"experts", c.n_experts}, {"top_k", c.top_k_experts},
                                    {"intermediate_size", c.moe_intermediate_size}}
                             : json(nullptr);
  const ParamCounts& p = st.params;
  j["parameters"] = {{"embedding", p.embedding}, {"ple_table", p.ple_table}, {"transformer_blocks", p.blocks},
                     {"total", p.total},         {"active_per_token", p.active}};
  if (st.have_weights) {
    j["weights_on_disk"] = {{"bytes", st.disk_bytes},
                            {"by_dtype", st.disk_bytes_by_dtype},
                            {"tensors", st.disk_tensors},
                            {"decoder_bytes", st.decoder_disk_bytes},
                            {"missing_tensors", st.missing_tensors}};
  } else {
    j["weights_on_disk"] = nullptr;
  }
  j["per_token"] = {{"params_streamed_without_lm_head", p.streamed_without_head},
                    {"lm_head_params", p.lm_head},
                    {"params_streamed", p.streamed},
                    {"bytes_bf16", st.streamed_bytes_bf16},
                    {"bytes_checkpoint", st.checkpoint_dtypes_known ? json(st.streamed_bytes_checkpoint) : json(nullptr)}};
  json kv_types = json::object();
  for (const auto& [t, k] : st.kv_by_type)
    kv_types[layer_type_name(t)] = {{"layers", k.layers},       {"kv_layers", k.kv_layers},
                                    {"shared_layers", k.shared_layers}, {"bytes_16bit", k.bytes16},
                                    {"bytes_f32", k.bytes32}};
  j["kv_cache_per_token"] = {{"bytes_16bit", st.kv_bytes16},
                             {"bytes_f32", st.kv_bytes32},
                             {"by_type", kv_types},
                             {"bytes_16bit_per_layer", st.kv_bytes16_per_layer}};
  return j;
}

void print_text(const std::string& origin, const ModelConfig& c, const ModelStats& st) {
  std::printf("%s: %s (model_type %s%s)\n", origin.c_str(), family_name(c.family), c.model_type.c_str(),
              c.multimodal_wrapper ? ", text decoder of a multimodal checkpoint" : "");
  std::printf("  vocab %d, hidden %d, %d layers, %d query heads, context %d", c.vocab_size, c.hidden_size,
              c.n_layers, c.n_heads, c.max_position_embeddings);
  if (c.attn_softcap > 0) std::printf(", attention soft-cap %g", static_cast<double>(c.attn_softcap));
  if (c.final_softcap > 0) std::printf(", final soft-cap %g", static_cast<double>(c.final_softcap));
  std::printf("\n");
  std::vector<int> full;
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layers[i].type == LayerType::Full) full.push_back(i);
  std::printf("  layers: %s (S sliding, F full; full: %s)\n", layer_pattern_string(c).c_str(),
              full.empty() ? "none" : join(full, ",").c_str());
  for (LayerType t : {LayerType::Sliding, LayerType::Full}) {
    const LayerConfig* l = first_of(c, t);
    if (!l) continue;
    const int n = st.kv_by_type.at(t).layers;
    std::printf("  %-8s %2d layers: head dim %s, kv heads %s%s", t == LayerType::Sliding ? "sliding" : "full", n,
                join(distinct(c, t, [](const LayerConfig& x) { return x.head_dim; }), "/").c_str(),
                join(distinct(c, t, [](const LayerConfig& x) { return x.n_kv_heads; }), "/").c_str(),
                l->k_eq_v ? " (K=V: no v_proj)" : "");
    if (t == LayerType::Sliding) std::printf(", window %d", c.sliding_window);
    std::printf(", %s, MLP %s\n", rope_str(*l).c_str(),
                join(distinct(c, t, [](const LayerConfig& x) { return x.intermediate_size; }), "/").c_str());
  }
  const Sharing sh = sharing_of(c);
  if (sh.count > 0) {
    std::printf("  KV sharing: layers %d-%d (%d) store no K/V; they read", sh.first, c.n_layers - 1, sh.count);
    bool first = true;
    for (const auto& [t, s] : sh.source) {
      std::printf("%s %s -> layer %d", first ? "" : ",", t == LayerType::Sliding ? "sliding" : "full", s);
      first = false;
    }
    std::printf("\n");
  }
  if (c.ple_dim > 0)
    std::printf("  per-layer embeddings: %d per layer, table [%d, %lld]\n", c.ple_dim, c.ple_vocab,
                static_cast<long long>(c.n_layers) * c.ple_dim);
  if (c.n_experts > 0)
    std::printf("  MoE: %d experts, top %d, expert MLP %d (beside the dense MLP)\n", c.n_experts, c.top_k_experts,
                c.moe_intermediate_size);

  const ParamCounts& p = st.params;
  std::printf("parameters: %s\n", commas(p.total).c_str());
  std::printf("  embedding (V*H)      %16s\n", commas(p.embedding).c_str());
  if (p.ple_table) std::printf("  PLE table            %16s\n", commas(p.ple_table).c_str());
  std::printf("  transformer blocks   %16s\n", commas(p.blocks).c_str());
  if (p.active != p.total) std::printf("  active per token     %16s\n", commas(p.active).c_str());

  if (st.have_weights) {
    std::printf("weights on disk: %s bytes (%s) in %lld tensors:", commas(st.disk_bytes).c_str(), gb(st.disk_bytes).c_str(),
                static_cast<long long>(st.disk_tensors));
    for (const auto& [d, b] : st.disk_bytes_by_dtype) std::printf(" %s %s", d.c_str(), commas(b).c_str());
    std::printf("\n");
    if (st.decoder_disk_bytes != st.disk_bytes)
      std::printf("  of which the text decoder: %s bytes\n", commas(st.decoder_disk_bytes).c_str());
    if (!st.missing_tensors.empty())
      std::printf("  missing %zu tensors the engine needs, e.g. %s\n", st.missing_tensors.size(),
                  st.missing_tensors[0].c_str());
  } else {
    std::printf("weights on disk: none (config only)\n");
  }
  std::printf("read per generated token: %s params = %s + LM head %s\n", commas(p.streamed).c_str(),
              commas(p.streamed_without_head).c_str(), commas(p.lm_head).c_str());
  std::printf("  %s bytes in bf16 (%s)", commas(st.streamed_bytes_bf16).c_str(), gb(st.streamed_bytes_bf16).c_str());
  if (st.checkpoint_dtypes_known)
    std::printf("; %s bytes as stored (%s)", commas(st.streamed_bytes_checkpoint).c_str(),
                gb(st.streamed_bytes_checkpoint).c_str());
  std::printf("\n");
  std::printf("KV cache bytes per token %27s %12s\n", "16-bit", "f32");
  for (const auto& [t, k] : st.kv_by_type) {
    char what[96];
    if (k.shared_layers)
      std::snprintf(what, sizeof what, "%s: %d layers (+%d shared: 0)", t == LayerType::Sliding ? "sliding" : "full",
                    k.kv_layers, k.shared_layers);
    else
      std::snprintf(what, sizeof what, "%s: %d layers", t == LayerType::Sliding ? "sliding" : "full", k.kv_layers);
    std::printf("  %-36s %12s %12s\n", what, commas(k.bytes16).c_str(), commas(k.bytes32).c_str());
  }
  std::printf("  %-36s %12s %12s\n", "total", commas(st.kv_bytes16).c_str(), commas(st.kv_bytes32).c_str());
}

int inspect(const InspectArgs& a) {
  if (!a.like.empty() && !a.model_dir.empty()) throw Error("give either -m DIR or --like NAME, not both");
  if (a.layers > 0 && a.like.empty()) throw Error("--layers needs --like");
  ModelConfig cfg;
  std::unique_ptr<TensorStore> store;
  std::string origin;
  if (!a.like.empty()) {
    const auto& names = known_model_names();
    if (std::find(names.begin(), names.end(), a.like) == names.end())
      throw Error("unknown --like '" + a.like + "' (known: " + known_model_names_joined() + ")");
    json c = known_model_config(a.like);
    if (a.layers > 0) c = truncate_layers(c, a.layers);
    cfg = parse_hf_config(c.dump(), known_model_generation_config(a.like).dump(), a.like);
    origin = a.like;
  } else {
    const std::string dir = model_path(a.model_dir);
    origin = dir;
    if (fs::is_regular_file(dir) && fs::path(dir).extension() == ".gguf") {  // a GGUF file alone
      auto g = GGUFFile::open(dir);
      cfg = gguf_model_config(*g);
      store = std::make_unique<TensorStore>(gguf_tensor_store(g));
    } else {
      cfg = load_hf_config(dir);
    }
    if (store) {
    } else if (fs::exists(fs::path(dir) / "model.safetensors") || fs::exists(fs::path(dir) / "model.safetensors.index.json"))
      store = std::make_unique<TensorStore>(TensorStore::open_dir(dir));  // headers only
  }
  // PLE width when config.json lacks hidden_size_per_layer_input: from the tensors, else none.
  if (store) resolve_config_from_tensors(cfg, *store);
  else if (cfg.ple_dim < 0) cfg.ple_dim = 0;
  const ModelStats st = compute_model_stats(cfg, store.get());
  if (a.json) std::cout << build_json(origin, cfg, st).dump() << "\n";
  else print_text(origin, cfg, st);
  std::fflush(stdout);
  if (std::ferror(stdout)) throw Error("cannot write the output (stdout)");
  return 0;
}

}  // namespace

Action register_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  app.add_option("-m,--model", a->model_dir, "model directory (config.json; safetensors optional) or .gguf file");
  app.add_option("--like", a->like, "a known model instead of a directory: " + known_model_names_joined());
  app.add_option("--layers", a->layers, "with --like: only the first N layers (as synth --layers N)")->check(kCount);
  app.add_flag("--json", a->json, "print one JSON object");
  return [a] { return inspect(*a); };
}

}  // namespace eg::cli
