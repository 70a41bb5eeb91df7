#include "store/model_check.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_util.h"
#include "engine/loaded_model.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "kv/kv_cache.h"

namespace eg::store {

namespace fs = std::filesystem;
using nlohmann::json;

ModelFacts read_model_facts(const std::string& path) {
  ModelFacts f;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    f.format = "hf";
    const std::string cfg_path = (fs::path(path) / "config.json").string();
    const std::string text = read_file(cfg_path);
    const json cfg = json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) throw Error(cfg_path + ": not a JSON object");
    if (auto a = cfg.find("architectures"); a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
      f.architecture = (*a)[0].get<std::string>();
    else if (auto t = cfg.find("model_type"); t != cfg.end() && t->is_string())
      f.architecture = t->get<std::string>();
    for (const json* c : {&cfg, cfg.contains("text_config") ? &cfg["text_config"] : nullptr}) {
      if (!c || !c->is_object() || !f.quantization.empty()) continue;
      for (const char* k : {"torch_dtype", "dtype"})
        if (auto d = c->find(k); d != c->end() && d->is_string() && f.quantization.empty()) f.quantization = d->get<std::string>();
    }
    TensorStore::open_dir(path);  // validates every safetensors header
  } else {
    f.format = "gguf";
    auto g = GGUFFile::open(path);
    if (const GGUFValue* a = g->find("general.architecture"); a && a->type == GGUFType::STRING) f.architecture = a->s;
    std::map<std::string, uint64_t> bytes;
    for (const auto& t : g->tensors()) {
      if (t.ne.size() < 2) continue;  // norms and biases do not say how a model is quantized
      int64_t n = 1;
      for (int64_t d : t.ne) n *= d;
      bytes[dtype_name(t.dtype)] += static_cast<uint64_t>(n);
    }
    uint64_t best = 0;
    for (const auto& [name, b] : bytes)
      if (b > best) best = b, f.quantization = name;
  }
  return f;
}

std::vector<int> smoke_generate(const std::string& path) {
  std::unique_ptr<LoadedModel> lm = LoadedModel::load_files(path);
  const StepExecutor& ex = lm->executor();
  const std::vector<int32_t> prompt = lm->encode_prompt(kSmokePrompt, false);
  if (prompt.empty()) throw Error("smoke test failed: the prompt encodes to no tokens");
  KVCacheOptions ko;
  ko.max_tokens = static_cast<int>(prompt.size()) + kSmokeTokens + 1;
  auto kv = ex.new_kv_cache(ko);
  auto ws = ex.new_workspace();
  std::vector<float> logits;
  const int64_t V = lm->tokenizer().vocab_size();
  auto check = [&](int step) {
    if (static_cast<int64_t>(logits.size()) < V) throw Error("smoke test failed: too few logits");
    for (float x : logits)
      if (!std::isfinite(x))
        throw Error("smoke test failed: non-finite logit at generated token " + std::to_string(step));
  };
  ex.prefill(prompt.data(), static_cast<int>(prompt.size()), *kv, *ws, LogitsMode::Last, logits);
  check(0);
  std::vector<int> out;
  int32_t id = argmax_row(logits.data(), static_cast<int64_t>(logits.size()));
  out.push_back(id);
  for (int i = 1; i < kSmokeTokens; ++i) {
    KVCache* kvs[1] = {kv.get()};
    ex.decode(&id, 1, kvs, *ws, logits);
    check(i);
    id = argmax_row(logits.data(), static_cast<int64_t>(logits.size()));
    out.push_back(id);
  }
  return out;
}

}  // namespace eg::store
