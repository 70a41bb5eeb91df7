// `edgegemma synth`: writes a random-weight Hugging Face checkpoint with the real shapes of a
// released Gemma model (config.json, generation_config.json, model.safetensors, tokenizer files),
// for benchmarks and memory tests. The weights are noise: the text it generates is meaningless.
//
// The configs come from model/known_models.h; the tensor list is the one the engine binds
// (model/model_stats.h checkpoint_tensors). model.safetensors is streamed to disk in chunks, so a
// 15 GB checkpoint needs only tens of MB of memory.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backend/cpu/thread_pool.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/progress.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/known_models.h"
#include "model/model_stats.h"
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
  bool quiet = false;
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr int64_t kRandomBlock = 65536;          // one random stream per block of elements
constexpr int64_t kChunk = 256 * kRandomBlock;   // elements generated and written at a time (16 Mi)

// Elements [begin, begin + n) of a tensor of uniform random values with standard deviation
// `stddev` (16 random bits per value, four values per splitmix64 step: cheap enough that writing
// the file, not generating it, sets the pace), deterministic per seed and independent of the
// thread count and of the chunking (begin must be a multiple of kRandomBlock).
void fill_random(uint8_t* out, DType dt, int64_t begin, int64_t n, float stddev, uint64_t seed) {
  const int64_t b0 = begin / kRandomBlock, nb = (n + kRandomBlock - 1) / kRandomBlock;
  const float scale = 2.0f * 1.7320508f * stddev / 65536.0f;  // u16 -> [-√3σ, √3σ)
  const float offset = -1.7320508f * stddev;
  cpu::parallel_for(nb, [&](int64_t bi, int) {
    const int64_t b = b0 + bi;
    uint64_t s = seed * 0x100000001b3ull + static_cast<uint64_t>(b);
    const int64_t lo = bi * kRandomBlock, hi = std::min(n, lo + kRandomBlock);
    uint64_t r = 0;
    for (int64_t i = lo; i < hi; ++i) {
      if (((i - lo) & 3) == 0) r = splitmix(s);
      const float v = static_cast<float>(r & 0xffff) * scale + offset;
      r >>= 16;
      if (dt == DType::F32) std::memcpy(out + 4 * i, &v, 4);
      else {
        const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(out + 2 * i, &h, 2);
      }
    }
  });
}

void fill_constant(uint8_t* out, DType dt, int64_t n, float v) {
  if (dt == DType::F32) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + 4 * i, &v, 4);
  } else {
    const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + 2 * i, &h, 2);
  }
}

void write_text(const fs::path& p, const std::string& s) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f) throw Error("cannot write " + p.string() + ": " + std::strerror(errno));
  const bool ok = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  if (std::fclose(f) != 0 || !ok) throw Error("cannot write " + p.string() + ": " + std::strerror(errno));
}

// A synthetic Gemma 2-style tokenizer of exactly `V` entries, in the format of the real Gemma
// tokenizer.json (see ../shared/models/README.md): <pad> <eos> <bos> <unk> = 0..3, <mask> 4,
// <2mass> 5, [@BOS@] 6, <unused0..98> 7..105 (non-special), <start_of_turn>/<end_of_turn> = 106/107 (special, as in
// Gemma 2), newline/space/tab runs (non-special added tokens), <0x00>..<0xFF>, "▁" and printable
// ASCII, a few merged words (hello, hi, the, fox...), then filler pieces "▁tokN".
void write_synthetic_tokenizer(const fs::path& dir, int V) {
  std::vector<std::string> pieces;
  std::vector<std::pair<int, bool>> added;  // id, special
  auto push = [&](std::string p) { pieces.push_back(std::move(p)); };
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>"}) push(s);
  push("<2mass>");
  push("[@BOS@]");
  for (int i = 0; pieces.size() < 106; ++i) push("<unused" + std::to_string(i) + ">");
  push("<start_of_turn>");
  push("<end_of_turn>");
  for (int i = 0; i < 108; ++i) added.push_back({i, i < 4 || i == 106 || i == 107});
  const std::string sp = "\xE2\x96\x81";  // ▁
  for (int n = 1; n <= 31; ++n) added.push_back({static_cast<int>(pieces.size()), false}), push(std::string(n, '\n'));
  for (int n = 2; n <= 31; ++n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += sp;
    added.push_back({static_cast<int>(pieces.size()), false});
    push(s);
  }
  for (int n = 1; n <= 31; ++n) added.push_back({static_cast<int>(pieces.size()), false}), push(std::string(n, '\t'));
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    push(buf);
  }
  push(sp);
  for (int c = 0x21; c < 0x7f; ++c) push(std::string(1, static_cast<char>(c)));
  // Merges (in rank order) and the pieces they create.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"},  {"th", "e"},   {sp, "the"},  {"h", "e"},  {"l", "l"}, {"he", "ll"}, {"hell", "o"},
      {sp, "hello"}, {"h", "i"},  {sp, "hi"},   {"f", "o"},  {"fo", "x"}, {sp, "fox"},  {sp, "a"}};
  for (const auto& [a, b] : merges) push(a + b);
  if (static_cast<int>(pieces.size()) > V) throw Error("internal: synthetic vocabulary too large");
  for (int id = static_cast<int>(pieces.size()); id < V; ++id) push(sp + "tok" + std::to_string(id));

  json added_json = json::array();
  json decoder = json::object();
  for (const auto& [id, special] : added) {
    added_json.push_back({{"id", id}, {"content", pieces[id]}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", special}});
    decoder[std::to_string(id)] = {{"content", pieces[id]}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false}, {"single_word", false}, {"special", special}};
  }
  json merges_json = json::array();
  for (const auto& [a, b] : merges) merges_json.push_back({a, b});
  json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_json},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<bos>"}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", "@VOCAB@"},
        {"merges", merges_json}}}};
  // The vocabulary in id order, written by hand (a JSON object of 256k keys in insertion order).
  std::string vocab = "{";
  vocab.reserve(static_cast<size_t>(V) * 20);
  for (int id = 0; id < V; ++id) {
    if (id) vocab += ",";
    vocab += json(pieces[id]).dump() + ":" + std::to_string(id);
  }
  vocab += "}";
  std::string text = tok.dump();
  const std::string marker = "\"@VOCAB@\"";
  text.replace(text.find(marker), marker.size(), vocab);
  write_text(dir / "tokenizer.json", text + "\n");

  const json cfg = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"added_tokens_decoder", decoder},
      {"bos_token", "<bos>"},
      {"eos_token", "<eos>"},
      {"pad_token", "<pad>"},
      {"unk_token", "<unk>"},
      {"chat_template",
       "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
       "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim"
       " + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 8192},
      {"padding_side", "left"},
      {"spaces_between_special_tokens", false},
      {"tokenizer_class", "GemmaTokenizer"},
      {"use_default_system_prompt", false}};
  write_text(dir / "tokenizer_config.json", cfg.dump(1) + "\n");
}

int synth(const SynthArgs& a) {
  // Validate everything before touching the output directory.
  const auto& names = known_model_names();
  if (std::find(names.begin(), names.end(), a.like) == names.end())
    throw Error("unknown --like '" + a.like + "' (known: " + known_model_names_joined() + ")");
  json cfg = known_model_config(a.like);
  const json gen = known_model_generation_config(a.like);
  const int full_layers = cfg["num_hidden_layers"].get<int>();
  if (a.layers < 0) throw Error("--layers must be >= 0 (0 = all layers)");
  if (a.layers > full_layers)
    throw Error("--layers " + std::to_string(a.layers) + " exceeds the " + std::to_string(full_layers) +
                " layers of " + a.like);
  if (a.layers > 0) cfg = truncate_layers(cfg, a.layers);
  DType dt;
  if (a.dtype == "bf16") dt = DType::BF16;
  else if (a.dtype == "f32") dt = DType::F32;
  else throw Error("--dtype must be bf16 or f32");
  cfg["torch_dtype"] = a.dtype == "bf16" ? "bfloat16" : "float32";
  // The engine's own loader must accept what we write.
  ModelConfig mc = parse_hf_config(cfg.dump(), gen.dump(), "synth config for " + a.like);
  const int V = mc.vocab_size;

  // Tokenizer: Gemma 2 gets a synthetic one of exactly V tokens unless --tokenizer is given;
  // Gemma 3 and 4 copy the real Gemma 3 tokenizer.
  const bool synthetic_tokenizer = mc.family == ModelFamily::Gemma2 && a.tokenizer_dir.empty();
  std::string tok_dir = a.tokenizer_dir;
  if (!synthetic_tokenizer) {
    if (tok_dir.empty()) {  // the fixtures folder: EDGEGEMMA_SHARED_DIR, else ../shared next to the sources
      const char* env = std::getenv("EDGEGEMMA_SHARED_DIR");
      tok_dir = (env && *env ? std::string(env) : std::string(EDGEGEMMA_SOURCE_DIR) + "/../shared") + "/tokenizers/gemma3";
    }
    if (!fs::exists(fs::path(tok_dir) / "tokenizer.json"))
      throw Error("no tokenizer.json in " + tok_dir + " (give the real Gemma 3 tokenizer with --tokenizer DIR)");
    const int tok_vocab = Tokenizer::load_dir(tok_dir).vocab_size();
    if (tok_vocab - V > 64 || tok_vocab - V < -1024)
      throw Error("the tokenizer in " + tok_dir + " has " + std::to_string(tok_vocab) + " tokens, " + a.like +
                  " has a vocabulary of " + std::to_string(V) + " (give the real Gemma 3 tokenizer)");
  }

  fs::create_directories(a.out);
  const fs::path out(a.out);

  // Weights, streamed chunk by chunk.
  const std::vector<CheckpointTensor> tensors = checkpoint_tensors(mc);
  std::vector<TensorSpec> specs;
  int64_t params = 0, bytes = 0;
  for (const auto& t : tensors) {
    specs.push_back({t.name, dt, t.shape});
    params += t.numel();
    bytes += t.numel() * static_cast<int64_t>(dtype_size(dt));
  }
  {
    SafetensorsWriter w((out / "model.safetensors").string(), specs,
                        {{"format", "pt"}, {"edgegemma_synth", a.like}});
    ProgressReporter reporter(ProgressReporter::stderr_options(a.quiet));
    ProgressTask progress(&reporter, "synth", bytes, ProgressUnit::Bytes);
    std::vector<uint8_t> buf;
    int64_t done = 0;
    uint64_t seed = a.seed;
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
      const CheckpointTensor& t = tensors[ti];
      const int64_t n = t.numel();
      const float stddev = 0.02f;
      ++seed;
      for (int64_t begin = 0; begin < n; begin += kChunk) {
        const int64_t m = std::min(kChunk, n - begin);
        buf.resize(static_cast<size_t>(m) * dtype_size(dt));
        switch (t.init) {
          case TensorInit::Random: fill_random(buf.data(), dt, begin, m, stddev, seed); break;
          case TensorInit::Zeros: fill_constant(buf.data(), dt, m, 0.0f); break;
          case TensorInit::Ones: fill_constant(buf.data(), dt, m, 1.0f); break;
        }
        w.append(buf.data(), buf.size());
        done += static_cast<int64_t>(buf.size());
        progress.update(done, "tensor " + std::to_string(ti + 1) + "/" + std::to_string(tensors.size()));
      }
    }
    w.finish();
    progress.finish();
  }

  write_text(out / "config.json", cfg.dump(2) + "\n");
  write_text(out / "generation_config.json", gen.dump(2) + "\n");
  if (synthetic_tokenizer) {
    write_synthetic_tokenizer(out, V);
  } else {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      const fs::path src = fs::path(tok_dir) / f;
      if (!fs::exists(src)) continue;
      const fs::path dst = out / f;
      fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
      fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                               fs::perms::others_read);
    }
  }
  std::printf("wrote %s: %s-shaped, %d layers, %lld parameters (%s, %.2f GB), random weights\n", a.out.c_str(),
              a.like.c_str(), mc.n_layers, static_cast<long long>(params), a.dtype.c_str(), bytes / 1e9);
  return 0;
}

}  // namespace

Action register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  app.add_option("--like", a->like, known_model_names_joined())->required();
  app.add_option("-o,--out", a->out, "output directory")->required();
  app.add_option("--layers", a->layers, "keep only the first N layers (default 0 = all)");
  app.add_option("--dtype", a->dtype, "bf16 (default) or f32");
  app.add_option("--seed", a->seed, "random seed");
  app.add_option("--tokenizer", a->tokenizer_dir,
                 "directory with the tokenizer.json to copy (default: the real Gemma 3 tokenizer in "
                 "$EDGEGEMMA_SHARED_DIR or ../shared/tokenizers/gemma3; gemma-2-2b: a synthetic 256000-token one)");
  app.add_flag("-q,--quiet", a->quiet, "no progress on stderr (errors still)");
  return [a] { return synth(*a); };
}

}  // namespace eg::cli
