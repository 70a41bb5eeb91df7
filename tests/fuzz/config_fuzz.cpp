// libFuzzer target: config.json (+ generation_config.json) of every Gemma generation
// (parse_hf_config: Gemma 2, Gemma 3 text / multimodal wrapper, Gemma 4 text / wrapper, both key
// layouts, rope parameters, layer types, KV sharing, MoE, PLE), docs/reliability.md. Built by
// scripts/fuzz.
//
// Input: config.json text, optionally followed by a NUL byte and generation_config.json text.
// Checks on an accepted config, the properties the forward pass relies on: one LayerConfig per
// layer; positive sizes; n_heads a multiple of every layer's n_kv_heads; RoPE pairs within the
// head; a KV source is an earlier layer that owns its cache; parameter_count() and n_kv_layers()
// run (UBSan reports a signed overflow). The same text also goes to the sentence-transformers
// parsers of embedding folders (embed/st_config.h: config_sentence_transformers.json prompts,
// modules.json): accepted prompts are sorted with a known default; modules have paths inside.
// Seeds (EG_FUZZ_WRITE_SEEDS): the config.json and generation_config.json of every fixture model
// (shared/models/*, tests/fixtures/*).
#include <filesystem>

#include "core/error.h"
#include "fuzz_util.h"
#include "embed/st_config.h"
#include "model/config.h"

namespace {

void check(bool ok, const std::string& what) {
  if (!ok) egfuzz::fail("config_fuzz", what);
}

void write_seeds(const std::string& dir) {
  namespace fs = std::filesystem;
  int k = 0;
  for (const std::string root : {egfuzz::shared_dir() + "/models", std::string(EG_SOURCE_DIR) + "/tests/fixtures",
                                 std::string(EG_SOURCE_DIR) + "/models"}) {
    for (const auto& e : fs::directory_iterator(root)) {
      const fs::path cfg = e.path() / "config.json";
      if (!fs::exists(cfg)) continue;
      std::string seed = egfuzz::read_text(cfg.string());
      egfuzz::write_seed(dir, e.path().filename().string() + "-" + std::to_string(k++), seed);
      for (const char* st : {"modules.json", "config_sentence_transformers.json"})
        if (fs::exists(e.path() / st))
          egfuzz::write_seed(dir, e.path().filename().string() + "-st-" + std::to_string(k++),
                             egfuzz::read_text((e.path() / st).string()));
      const fs::path gen = e.path() / "generation_config.json";
      if (fs::exists(gen))
        egfuzz::write_seed(dir, e.path().filename().string() + "-gen-" + std::to_string(k++),
                           seed + std::string(1, '\0') + egfuzz::read_text(gen.string()));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  egfuzz::maybe_write_seeds(write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [cfg, gen] = egfuzz::split(in, std::string_view("\0", 1));
  try {
    eg::embed::StConfig st;
    eg::embed::parse_st_prompts(std::string(cfg), "st", st);
    for (size_t i = 1; i < st.prompts.size(); ++i) check(st.prompts[i - 1].name <= st.prompts[i].name, "prompts not sorted");
    bool known = st.default_prompt_name.empty();
    for (const auto& p : st.prompts) known |= p.name == st.default_prompt_name;
    check(known, "default prompt not among the prompts");
  } catch (const eg::Error&) {
  }
  try {
    for (const auto& [type, path] : eg::embed::parse_st_modules(std::string(cfg), "modules"))
      check(path.find("..") == std::string::npos && (path.empty() || path[0] != '/'), "module path leaves the folder");
  } catch (const eg::Error&) {
  }
  eg::ModelConfig c;
  try {
    c = eg::parse_hf_config(std::string(cfg), std::string(gen), "config.json");
  } catch (const eg::Error&) {
    return 0;
  }
  check(c.n_layers > 0 && static_cast<size_t>(c.n_layers) == c.layers.size(), "layers");
  check(c.vocab_size > 0 && c.hidden_size > 0 && c.n_heads > 0 && c.max_position_embeddings > 0, "sizes");
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const eg::LayerConfig& l = c.layers[i];
    const std::string at = "layer " + std::to_string(i) + ": ";
    check(l.head_dim > 0 && l.n_kv_heads > 0 && l.intermediate_size > 0, at + "sizes");
    check(c.n_heads % l.n_kv_heads == 0, at + "n_heads not a multiple of n_kv_heads");
    check(l.rope_dims > 0 && l.rope_dims <= l.head_dim && l.rope_dims % 2 == 0, at + "rope_dims");
    check(l.rope_pairs >= 0 && l.rope_pairs <= l.rope_dims / 2, at + "rope_pairs");
    check(l.type == eg::LayerType::Full || c.sliding_window > 0, at + "sliding layer without a window");
    if (l.kv_source >= 0) {
      check(static_cast<size_t>(l.kv_source) < i, at + "kv_source not an earlier layer");
      check(c.layers[static_cast<size_t>(l.kv_source)].kv_source < 0, at + "kv_source is itself shared");
    }
  }
  (void)c.parameter_count();
  (void)c.n_kv_layers();
  return 0;
}
