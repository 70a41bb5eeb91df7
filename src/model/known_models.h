// The released Gemma text decoders the engine supports, as Hugging Face Hub-style config.json
// objects (values from ../shared/docs/gemma-architectures.md §1.1, §2.1, §3.1-§3.2, §5.1).
//
// The configs are those of the text decoder alone (Gemma3ForCausalLM / Gemma4ForCausalLM, tensors
// under "model."), also for models published as multimodal wrappers (gemma-3-4b, gemma-4-*).
// Gemma 4 uses the Hub's flat spelling (head_dim / global_head_dim, num_global_key_value_heads,
// explicit layer_types, rope_parameters per layer type), not transformers >= 5.15's
// per_layer_config. Used by `edgegemma synth` and by the tests of `edgegemma inspect`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace eg {

/// Names accepted by known_model_config(), in release order: gemma-2-2b, gemma-3-270m, gemma-3-1b,
/// gemma-3-4b, gemma-4-e2b, gemma-4-e4b, gemma-4-26b-a4b, gemma-4-31b.
const std::vector<std::string>& known_model_names();

/// The names joined by ", " (for messages).
std::string known_model_names_joined();

/// config.json of a known model. Throws eg::Error "unknown model 'x' (known: ...)".
nlohmann::json known_model_config(const std::string& name);

/// generation_config.json of a known model: bos/pad ids and the eos ids the released (instruction
/// tuned) model stops on: Gemma 2 [1, 107], Gemma 3 [1, 106], Gemma 4 [1, 106, 50].
nlohmann::json known_model_generation_config(const std::string& name);

/// A copy of a Hub-style config.json (flat, or a multimodal wrapper with text_config) that keeps
/// only the first n layers: num_hidden_layers = n, layer_types cut to n entries and, for Gemma 4,
/// the last entry made full_attention (the loader forces it) and num_kv_shared_layers reduced so
/// that the shared layers stay the tail of the original ones: max(0, shared - (L - n)).
/// Throws eg::Error when n < 1 or n > L.
nlohmann::json truncate_layers(const nlohmann::json& config, int n);

}  // namespace eg
