// The sentence-transformers side of an embedding model folder (sentence-transformers 2.x-6.x
// layouts; EmbeddingGemma-300m's): which modules follow the transformer, their settings, and the
// prompts. The transformer itself (config.json + model.safetensors at the folder root) is read by
// model/. Internal to src/embed.
#pragma once

#include <string>
#include <vector>

namespace eg::embed {

struct Prompt {
  std::string name;    // "query"
  std::string prefix;  // "task: search result | query: "
};

/// One sentence-transformers Dense module: y = W·x (+ b), identity activation only.
struct DenseSpec {
  std::string dir;  // folder of its weights, e.g. "<model>/2_Dense"
  int in = 0, out = 0;
  bool bias = false;
};

struct StConfig {
  std::vector<Prompt> prompts;      // config_sentence_transformers.json "prompts", sorted by name
  std::string default_prompt_name;  // "" = none (null in the file)
  bool include_prompt = true;       // 1_Pooling: the prompt's tokens are pooled too
  std::vector<DenseSpec> dense;     // in module order (EmbeddingGemma: 768->3072, 3072->768)
  bool normalize = false;           // a Normalize module ends the pipeline
  int max_seq_length = 0;           // sentence_bert_config.json; 0 = not given
};

/// Reads modules.json and the module configs of `dir`. The module list must be Transformer
/// (path ""), Pooling (mean, include_prompt true), any number of Dense (identity activation),
/// optionally Normalize; anything else is an eg::Error naming the file and the module.
/// config_sentence_transformers.json and sentence_bert_config.json are optional.
StConfig load_st_config(const std::string& dir);

/// The prompts part alone (config_sentence_transformers.json text); for tests and fuzzing.
/// Throws eg::Error naming `origin` for invalid JSON or ill-typed fields (prompts must map
/// strings to strings; default_prompt_name a string or null and one of the prompts).
void parse_st_prompts(const std::string& json_text, const std::string& origin, StConfig& out);

/// Parses modules.json text and returns the modules' (type suffix, path) pairs, e.g.
/// ("Pooling", "1_Pooling"); the type suffix is the last dotted component of "type".
std::vector<std::pair<std::string, std::string>> parse_st_modules(const std::string& json_text,
                                                                  const std::string& origin);

}  // namespace eg::embed
