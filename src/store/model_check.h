// The checks a model version passes before a store pointer may move to it (docs/model-store.md,
// "Verify before switching"): its headers parse, it loads, and a short greedy generation gives
// finite logits.
#pragma once
#include <string>
#include <vector>

namespace eg::store {

/// What the headers say: for a Hugging Face folder config.json (architectures[0], else
/// model_type; torch_dtype / dtype, also of text_config) and every *.safetensors header
/// (TensorStore::open_dir validates them); for a .gguf file its header and tensor table
/// (GGUFFile::open), general.architecture and the tensor type holding the most bytes.
struct ModelFacts {
  std::string format;        // "hf" or "gguf"
  std::string architecture;
  std::string quantization;
};

/// Parses the headers of `path` (a folder or a .gguf file). Throws eg::Error naming the file.
ModelFacts read_model_facts(const std::string& path);

/// The smoke generation: loads `path` (LoadedModel::load_files, CPU), prefills the fixed prompt
/// kSmokePrompt and decodes kSmokeTokens greedy tokens, checking that every logit is finite.
/// Returns the generated ids. Throws eg::Error "smoke test failed: ..." (or the loader's error).
inline constexpr const char* kSmokePrompt = "The capital of France is";
inline constexpr int kSmokeTokens = 4;
std::vector<int> smoke_generate(const std::string& path);

}  // namespace eg::store
