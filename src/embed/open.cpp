// open_embedder / is_embedding_model (open.h): a sentence-transformers folder or a
// gemma-embedding GGUF -> GemmaEmbedder.
#include "embed/open.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "embed/gemma_embedder.h"
#include "format/gguf.h"
#include "format/safetensors.h"

namespace eg::embed {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::char_traits<char>::length(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

DenseLayer dense_from(const TensorInfo& w, const TensorInfo* b, std::shared_ptr<const void> owner,
                      const std::string& what) {
  if (w.shape.size() != 2) throw Error(what + ": weight shape " + w.shape_str() + " is not [out, in]");
  DenseLayer l;
  l.w = ops::Weight{w.data, w.dtype, w.shape[0], w.shape[1]};
  if (b) {
    if (b->shape != std::vector<int64_t>{w.shape[0]} || b->dtype != DType::F32)
      throw Error(what + ": bias must be F32 [" + std::to_string(w.shape[0]) + "]");
    const float* p = reinterpret_cast<const float*>(b->data);
    l.bias.assign(p, p + w.shape[0]);
  }
  l.owner = std::move(owner);
  return l;
}

// tokenizer_config.json: model_max_length (0 when absent or implausible), add_bos_token,
// add_eos_token (false when absent). The tokenizer loader has validated the file already.
struct TokenizerFlags {
  int max_length = 0;
  bool add_bos = false, add_eos = false;
};

TokenizerFlags tokenizer_flags(const fs::path& dir) {
  TokenizerFlags f;
  const fs::path p = dir / "tokenizer_config.json";
  if (!fs::exists(p)) return f;
  try {
    const auto j = nlohmann::json::parse(read_file(p.string()));
    if (!j.is_object()) return f;
    if (j.contains("model_max_length") && j["model_max_length"].is_number_integer()) {
      const int64_t v = j["model_max_length"].get<int64_t>();
      if (v > 0 && v < (1 << 24)) f.max_length = static_cast<int>(v);
    }
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) f.add_bos = j["add_bos_token"];
    if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) f.add_eos = j["add_eos_token"];
  } catch (const nlohmann::json::exception&) {
  }
  return f;
}

std::unique_ptr<Embedder> open_folder(const std::string& dir, const OpenOptions& o) {
  const StConfig st = load_st_config(dir);
  if (!st.normalize) throw Error(dir + ": modules.json has no Normalize module (EmbeddingGemma's layout ends with one)");
  GemmaEmbedder::Parts p;
  p.model = Model::load_dir(dir);
  if (!p.model->config().bidirectional)
    throw Error(dir + "/config.json: not a bidirectional encoder (use_bidirectional_attention is not true)");
  p.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load_dir(dir));
  const fs::path root(dir);
  if (fs::exists(root / "model.safetensors.index.json")) {
    std::vector<std::string> shards;
    for (const auto& e : fs::directory_iterator(root))
      if (ends_with(e.path().string(), ".safetensors")) shards.push_back(e.path().string());
    std::sort(shards.begin(), shards.end());
    p.weight_files = shards;
  } else {
    p.weight_files.push_back((root / "model.safetensors").string());
  }
  for (const DenseSpec& d : st.dense) {
    const std::string f = (fs::path(d.dir) / "model.safetensors").string();
    auto store = std::make_shared<TensorStore>(TensorStore::open_file(f));
    const TensorInfo* w = store->find("linear.weight");
    if (!w) throw Error(f + ": missing tensor 'linear.weight'");
    if (w->shape != std::vector<int64_t>{d.out, d.in})
      throw Error(f + ": linear.weight has shape " + w->shape_str() + ", config.json says [" + std::to_string(d.out) +
                  ", " + std::to_string(d.in) + "]");
    const TensorInfo* b = store->find("linear.bias");
    if (d.bias && !b) throw Error(f + ": config.json has bias true but there is no 'linear.bias'");
    p.dense.push_back(dense_from(*w, d.bias ? b : nullptr, store, f));
    p.weight_files.push_back(f);
  }
  p.prompts = st.prompts;
  p.default_prompt_name = st.default_prompt_name;
  const TokenizerFlags tf = tokenizer_flags(root);
  p.ensure_bos = tf.add_bos;
  p.ensure_eos = tf.add_eos;
  p.max_tokens = st.max_seq_length > 0 ? st.max_seq_length : tf.max_length;
  if (p.max_tokens <= 0 || p.max_tokens > p.model->config().max_position_embeddings)
    p.max_tokens = p.model->config().max_position_embeddings;
  p.threads = o.threads;
  p.model->repack_for_cpu();
  return std::make_unique<GemmaEmbedder>(std::move(p));
}

std::unique_ptr<Embedder> open_gguf(const std::string& path, const OpenOptions& o) {
  std::shared_ptr<GGUFFile> g = GGUFFile::open(path);
  const std::string arch = g->get_string("general.architecture", "");
  if (arch != "gemma-embedding")
    throw Error(path + ": general.architecture is '" + arch + "', not an embedding model (gemma-embedding)");
  const int64_t pooling = g->get_int("gemma-embedding.pooling_type", 1);
  if (pooling != 1) throw Error(path + ": pooling_type " + std::to_string(pooling) + " is not supported (only 1 = mean)");
  GemmaEmbedder::Parts p;
  p.model = Model::load_gguf(path);
  p.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*g));
  p.weight_files = {path};
  // dense_2 / dense_3: present when converted with the sentence-transformers Dense modules.
  const TensorStore& store = p.model->weights().store;
  for (const char* n : {"dense_2", "dense_3"}) {
    const TensorInfo* w = store.find(std::string(n) + ".weight");
    if (!w) continue;
    for (const char* io : {"_feat_in", "_feat_out"}) {
      const std::string key = "gemma-embedding." + std::string(n) + io;
      if (!g->find(key)) continue;
      const int64_t v = g->get_int(key);
      if (v != w->shape[io[6] == 'i' ? 1 : 0])
        throw Error(path + ": metadata '" + key + "' = " + std::to_string(v) + " does not match " + n + ".weight " +
                    w->shape_str());
    }
    p.dense.push_back(dense_from(*w, store.find(std::string(n) + ".bias"), nullptr, path + ": " + n));
  }
  // The sentence-transformers prompts, when the writer stored them (edgegemma quantize does;
  // llama.cpp's converter does not: such a file offers no tasks).
  const GGUFValue* names = g->find("edgegemma.embedding.prompt_names");
  const GGUFValue* texts = g->find("edgegemma.embedding.prompts");
  if (names || texts) {
    if (!names || !texts || !names->is_array() || !texts->is_array() || names->elem != GGUFType::STRING ||
        texts->elem != GGUFType::STRING || names->strs.size() != texts->strs.size())
      throw Error(path + ": edgegemma.embedding.prompt_names / prompts must be string arrays of the same length");
    for (size_t i = 0; i < names->strs.size(); ++i) p.prompts.push_back({names->strs[i], texts->strs[i]});
  }
  p.default_prompt_name = g->get_string("edgegemma.embedding.default_prompt_name", "");
  if (!p.default_prompt_name.empty() &&
      std::none_of(p.prompts.begin(), p.prompts.end(), [&](const Prompt& x) { return x.name == p.default_prompt_name; }))
    throw Error(path + ": default prompt '" + p.default_prompt_name + "' is not among its prompts");
  p.max_tokens = p.model->config().max_position_embeddings;
  p.threads = o.threads;
  p.model->repack_for_cpu();
  return std::make_unique<GemmaEmbedder>(std::move(p));
}

}  // namespace

std::unique_ptr<Embedder> open_embedder(const std::string& path, const OpenOptions& options) {
  if (!fs::exists(path)) throw Error("embedding model path does not exist: " + path);
  if (fs::is_directory(path)) return open_folder(path, options);
  return open_gguf(path, options);
}

bool is_embedding_model(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return fs::exists(fs::path(path) / "modules.json", ec);
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    return GGUFFile::open(path)->get_string("general.architecture", "") == "gemma-embedding";
  } catch (const Error&) {
    return false;
  }
}

}  // namespace eg::embed
