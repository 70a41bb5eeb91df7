// `edgegemma synth`: writes a random-weight Hugging Face checkpoint with the real shapes of a
// released Gemma model (config.json, model.safetensors, tokenizer files), for benchmarks and
// memory tests. The weights are noise: the text it generates is meaningless.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "format/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace eg::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct SynthArgs {
  std::string like;
  std::string out;
  std::string tokenizer_dir;
  int layers = 0;
  std::string dtype = "bf16";
  uint64_t seed = 1;
};

// Hub-layout config.json of the released text models (gemma-architectures.md §2.1, §5.1).
json shape_of(const std::string& like) {
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
  if (like == "gemma-3-270m") {
    c.update({{"vocab_size", 262144}, {"hidden_size", 640}, {"intermediate_size", 2048},
              {"num_hidden_layers", 18}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
              {"sliding_window", 512}, {"max_position_embeddings", 32768}});
  } else if (like == "gemma-3-1b") {
    c.update({{"vocab_size", 262144}, {"hidden_size", 1152}, {"intermediate_size", 6912},
              {"num_hidden_layers", 26}, {"num_attention_heads", 4}, {"num_key_value_heads", 1},
              {"sliding_window", 512}, {"max_position_embeddings", 32768}});
  } else if (like == "gemma-3-4b") {
    c.update({{"vocab_size", 262208}, {"hidden_size", 2560}, {"intermediate_size", 10240},
              {"num_hidden_layers", 34}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
              {"sliding_window", 1024}, {"max_position_embeddings", 131072},
              {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}});
  } else {
    throw Error("unknown --like '" + like + "' (known: gemma-3-270m, gemma-3-1b, gemma-3-4b)");
  }
  return c;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Approximately normal(0, stddev) values (sum of four uniforms), deterministic per seed and
// independent of the thread count (one stream per 64 Ki block).
void fill_random(std::vector<uint8_t>& buf, DType dt, int64_t n, float stddev, uint64_t seed) {
  buf.resize(static_cast<size_t>(n) * dtype_size(dt));
  const int64_t block = 65536;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + block - 1) / block; ++b) {
    uint64_t s = seed * 0x100000001b3ull + static_cast<uint64_t>(b);
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      const uint64_t r = splitmix(s);
      float u = 0.0f;
      for (int k = 0; k < 4; ++k) u += static_cast<float>((r >> (16 * k)) & 0xffff) / 65535.0f;
      const float v = (u - 2.0f) * 1.7320508f * stddev;
      if (dt == DType::F32) std::memcpy(buf.data() + 4 * i, &v, 4);
      else {
        const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(buf.data() + 2 * i, &h, 2);
      }
    }
  }
}

int synth(const SynthArgs& a) {
  json cfg = shape_of(a.like);
  if (a.layers < 0) throw Error("--layers must be >= 0 (0 = all layers)");
  if (a.layers > 0) {
    if (a.layers > cfg["num_hidden_layers"].get<int>())
      throw Error("--layers " + std::to_string(a.layers) + " exceeds the model's " +
                  std::to_string(cfg["num_hidden_layers"].get<int>()));
    cfg["num_hidden_layers"] = a.layers;
  }
  DType dt;
  if (a.dtype == "bf16") dt = DType::BF16;
  else if (a.dtype == "f32") dt = DType::F32;
  else throw Error("--dtype must be bf16 or f32");
  cfg["torch_dtype"] = a.dtype == "bf16" ? "bfloat16" : "float32";

  std::string tok_dir = a.tokenizer_dir;
  if (tok_dir.empty()) tok_dir = std::string(EDGEGEMMA_SOURCE_DIR) + "/../shared/tokenizers/gemma3";
  if (!fs::exists(fs::path(tok_dir) / "tokenizer.json"))
    throw Error("no tokenizer.json in " + tok_dir + " (give the real Gemma 3 tokenizer with --tokenizer DIR)");
  {
    const int tok_vocab = Tokenizer::load_dir(tok_dir).vocab_size();
    const int V = cfg["vocab_size"];
    if (tok_vocab - V > 64 || tok_vocab - V < -1024)
      throw Error("the tokenizer in " + tok_dir + " has " + std::to_string(tok_vocab) + " tokens, " + a.like +
                  " has a vocabulary of " + std::to_string(V) + " (give the real Gemma 3 tokenizer)");
  }

  fs::create_directories(a.out);
  const int H = cfg["hidden_size"], I = cfg["intermediate_size"], L = cfg["num_hidden_layers"];
  const int nh = cfg["num_attention_heads"], nkv = cfg["num_key_value_heads"], hd = cfg["head_dim"];
  const int V = cfg["vocab_size"];

  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorToWrite> tensors;
  uint64_t seed = a.seed;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float stddev) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    bufs.emplace_back();
    if (stddev > 0) fill_random(bufs.back(), dt, n, stddev, ++seed);
    else bufs.back().assign(static_cast<size_t>(n) * dtype_size(dt), 0);  // norm w = 0: identity for (1+w)
    tensors.push_back({name, dt, std::move(shape), nullptr});
  };
  add("model.embed_tokens.weight", {V, H}, 0.02f);
  add("model.norm.weight", {H}, 0);
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {nh * hd, H}, 0.02f);
    add(p + "self_attn.k_proj.weight", {nkv * hd, H}, 0.02f);
    add(p + "self_attn.v_proj.weight", {nkv * hd, H}, 0.02f);
    add(p + "self_attn.o_proj.weight", {H, nh * hd}, 0.02f);
    add(p + "self_attn.q_norm.weight", {hd}, 0);
    add(p + "self_attn.k_norm.weight", {hd}, 0);
    add(p + "mlp.gate_proj.weight", {I, H}, 0.02f);
    add(p + "mlp.up_proj.weight", {I, H}, 0.02f);
    add(p + "mlp.down_proj.weight", {H, I}, 0.02f);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      add(p + n + ".weight", {H}, 0);
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = bufs[i].data();
  write_safetensors((fs::path(a.out) / "model.safetensors").string(), tensors,
                    {{"format", "pt"}, {"edgegemma_synth", a.like}});
  {
    std::FILE* f = std::fopen((fs::path(a.out) / "config.json").c_str(), "wb");
    if (!f) throw Error("cannot write config.json in " + a.out);
    const std::string s = cfg.dump(2) + "\n";
    std::fwrite(s.data(), 1, s.size(), f);
    std::fclose(f);
  }
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(tok_dir) / f;
    if (!fs::exists(src)) continue;
    const fs::path dst = fs::path(a.out) / f;
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
    fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  }
  int64_t params = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    params += n;
  }
  std::printf("wrote %s: %s-shaped, %d layers, %lld parameters (%s), random weights\n", a.out.c_str(),
              a.like.c_str(), L, static_cast<long long>(params), a.dtype.c_str());
  return 0;
}

}  // namespace

Action register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  app.add_option("--like", a->like, "gemma-3-270m | gemma-3-1b | gemma-3-4b")->required();
  app.add_option("-o,--out", a->out, "output directory")->required();
  app.add_option("--layers", a->layers, "keep only the first N layers (default 0 = all)");
  app.add_option("--dtype", a->dtype, "bf16 (default) or f32");
  app.add_option("--seed", a->seed, "random seed");
  app.add_option("--tokenizer", a->tokenizer_dir, "directory with the real tokenizer.json to copy");
  return [a] { return synth(*a); };
}

}  // namespace eg::cli
