#include "model/known_models.h"

#include <algorithm>

#include "core/error.h"

namespace eg {

using nlohmann::json;

namespace {

// gemma-architectures.md §1.1 (gemma-2-2b column).
json gemma2_2b() {
  return {{"architectures", {"Gemma2ForCausalLM"}},
          {"model_type", "gemma2"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"attn_logit_softcapping", 50.0},
          {"final_logit_softcapping", 30.0},
          {"bos_token_id", 2},
          {"eos_token_id", 1},
          {"pad_token_id", 0},
          {"cache_implementation", "hybrid"},
          {"head_dim", 256},
          {"hidden_act", "gelu_pytorch_tanh"},
          {"hidden_activation", "gelu_pytorch_tanh"},
          {"hidden_size", 2304},
          {"intermediate_size", 9216},
          {"max_position_embeddings", 8192},
          {"num_attention_heads", 8},
          {"num_hidden_layers", 26},
          {"num_key_value_heads", 4},
          {"query_pre_attn_scalar", 256},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"sliding_window", 4096},
          {"tie_word_embeddings", true},
          {"torch_dtype", "bfloat16"},
          {"vocab_size", 256000}};
}

// gemma-architectures.md §2.1: the Hub layout (rope_theta, rope_local_base_freq,
// sliding_window_pattern, rope_scaling) of the text decoder.
json gemma3(const std::string& name) {
  json c = {{"architectures", {"Gemma3ForCausalLM"}},
            {"model_type", "gemma3_text"},
            {"attention_bias", false},
            {"attn_logit_softcapping", nullptr},
            {"final_logit_softcapping", nullptr},
            {"bos_token_id", 2},
            {"eos_token_id", json::array({1, 106})},
            {"pad_token_id", 0},
            {"head_dim", 256},
            {"query_pre_attn_scalar", 256},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 1000000.0},
            {"rope_local_base_freq", 10000.0},
            {"rope_scaling", nullptr},
            {"sliding_window_pattern", 6},
            {"tie_word_embeddings", true},
            {"torch_dtype", "bfloat16"}};
  if (name == "gemma-3-270m") {
    c.update({{"vocab_size", 262144}, {"hidden_size", 640}, {"intermediate_size", 2048},
              {"num_hidden_layers", 18}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
              {"sliding_window", 512}, {"max_position_embeddings", 32768}});
  } else if (name == "gemma-3-1b") {
    c.update({{"vocab_size", 262144}, {"hidden_size", 1152}, {"intermediate_size", 6912},
              {"num_hidden_layers", 26}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
              {"sliding_window", 512}, {"max_position_embeddings", 32768}});
  } else {  // gemma-3-4b (text_config of the multimodal checkpoint)
    c.update({{"vocab_size", 262208}, {"hidden_size", 2560}, {"intermediate_size", 10240},
              {"num_hidden_layers", 34}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
              {"sliding_window", 1024}, {"max_position_embeddings", 131072},
              {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}});
  }
  return c;
}

struct Gemma4Shape {
  int hidden, layers, heads, kv, global_kv;  // global_kv 0: null (full layers use kv)
  bool k_eq_v;
  int window, inter, full_period, shared, ple;
  bool double_wide;
  int experts, top_k, moe_inter;
  int ctx;
  const char* bidirectional;  // nullptr: null
};

// gemma-architectures.md §3.1, §3.2 (flat Hub keys).
json gemma4(const Gemma4Shape& s) {
  json types = json::array();
  for (int i = 0; i < s.layers; ++i)
    types.push_back(((i + 1) % s.full_period == 0 || i == s.layers - 1) ? "full_attention" : "sliding_attention");
  json c = {{"architectures", {"Gemma4ForCausalLM"}},
            {"model_type", "gemma4_text"},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"attention_k_eq_v", s.k_eq_v},
            {"bos_token_id", 2},
            {"eos_token_id", json::array({1, 106})},
            {"pad_token_id", 0},
            {"final_logit_softcapping", 30.0},
            {"head_dim", 256},
            {"global_head_dim", 512},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"hidden_size", s.hidden},
            {"hidden_size_per_layer_input", s.ple},
            {"intermediate_size", s.inter},
            {"layer_types", types},
            {"max_position_embeddings", s.ctx},
            {"num_attention_heads", s.heads},
            {"num_hidden_layers", s.layers},
            {"num_key_value_heads", s.kv},
            {"num_global_key_value_heads", s.global_kv > 0 ? json(s.global_kv) : json(nullptr)},
            {"num_kv_shared_layers", s.shared},
            {"rms_norm_eps", 1e-6},
            {"rope_parameters",
             {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
              {"full_attention",
               {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
            {"sliding_window", s.window},
            {"tie_word_embeddings", true},
            {"torch_dtype", "bfloat16"},
            {"use_bidirectional_attention", s.bidirectional ? json(s.bidirectional) : json(nullptr)},
            {"use_double_wide_mlp", s.double_wide},
            {"vocab_size", 262144},
            {"vocab_size_per_layer_input", 262144},
            {"enable_moe_block", s.experts > 0},
            {"num_experts", s.experts > 0 ? json(s.experts) : json(nullptr)},
            {"top_k_experts", s.experts > 0 ? json(s.top_k) : json(nullptr)},
            {"moe_intermediate_size", s.experts > 0 ? json(s.moe_inter) : json(nullptr)}};
  return c;
}

}  // namespace

const std::vector<std::string>& known_model_names() {
  static const std::vector<std::string> names = {"gemma-2-2b",  "gemma-3-270m", "gemma-3-1b",
                                                 "gemma-3-4b",  "gemma-4-e2b",  "gemma-4-e4b",
                                                 "gemma-4-26b-a4b", "gemma-4-31b"};
  return names;
}

std::string known_model_names_joined() {
  std::string s;
  for (const auto& n : known_model_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

json known_model_config(const std::string& name) {
  if (name == "gemma-2-2b") return gemma2_2b();
  if (name == "gemma-3-270m" || name == "gemma-3-1b" || name == "gemma-3-4b") return gemma3(name);
  //                      H     L   nh  kv gkv  K=V    W     I  per sh  P    2xI     E  K   Im   ctx
  if (name == "gemma-4-e2b") return gemma4({1536, 35, 8, 1, 0, false, 512, 6144, 5, 20, 256, true, 0, 0, 0, 131072, nullptr});
  if (name == "gemma-4-e4b") return gemma4({2560, 42, 8, 2, 0, false, 512, 10240, 6, 18, 256, false, 0, 0, 0, 131072, nullptr});
  if (name == "gemma-4-26b-a4b")
    return gemma4({2816, 30, 16, 8, 2, true, 1024, 2112, 6, 0, 0, false, 128, 8, 704, 262144, "vision"});
  if (name == "gemma-4-31b")
    return gemma4({5376, 60, 32, 16, 4, true, 1024, 21504, 6, 0, 0, false, 0, 0, 0, 262144, "vision"});
  throw Error("unknown model '" + name + "' (known: " + known_model_names_joined() + ")");
}

json known_model_generation_config(const std::string& name) {
  const json cfg = known_model_config(name);  // throws for an unknown name
  const std::string mt = cfg["model_type"];
  json eos = mt == "gemma2" ? json::array({1, 107}) : mt == "gemma3_text" ? json::array({1, 106})
                                                                          : json::array({1, 106, 50});
  return {{"bos_token_id", 2}, {"eos_token_id", eos}, {"pad_token_id", 0}};
}

json truncate_layers(const json& config, int n) {
  json out = config;
  const bool wrapped = out.contains("text_config") && out["text_config"].is_object();
  json& t = wrapped ? out["text_config"] : out;
  if (!t.contains("num_hidden_layers") || !t["num_hidden_layers"].is_number_integer())
    throw Error("config.json has no num_hidden_layers");
  const int L = t["num_hidden_layers"].get<int>();
  if (n < 1 || n > L)
    throw Error("--layers " + std::to_string(n) + " is outside 1.." + std::to_string(L) +
                " (the model has " + std::to_string(L) + " layers)");
  t["num_hidden_layers"] = n;
  const std::string mt = out.value("model_type", "");
  const bool g4 = mt == "gemma4" || mt == "gemma4_text";
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    json types = json::array();
    for (int i = 0; i < n && i < static_cast<int>(t["layer_types"].size()); ++i) types.push_back(t["layer_types"][i]);
    if (g4 && !types.empty()) types.back() = "full_attention";  // the loader forces the last layer full
    t["layer_types"] = types;
  }
  if (t.contains("num_kv_shared_layers") && t["num_kv_shared_layers"].is_number_integer()) {
    const int shared = t["num_kv_shared_layers"].get<int>();
    t["num_kv_shared_layers"] = std::max(0, shared - (L - n));
  }
  if (t.contains("per_layer_config") && t["per_layer_config"].is_object()) {
    json plc = json::object();
    for (const auto& [k, v] : t["per_layer_config"].items()) {
      try {
        if (std::stoi(k) < n) plc[k] = v;
      } catch (...) {
        plc[k] = v;  // not a layer index: left for the loader to report
      }
    }
    t["per_layer_config"] = plc;
  }
  return out;
}

}  // namespace eg
