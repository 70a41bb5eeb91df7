// `quantize` against llama.cpp's own files (../shared/models/gguf, made by llama-quantize from the
// same weights): tensor types follow llama-quantize's recipe exactly for all 12 quantized files;
// Q8_0 / Q4_0 / F32 tensor bytes are identical; K-quant tensors (our own quantizer) are as accurate
// as llama.cpp's. Also round trips, the AWQ hook, and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <filesystem>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "format/gguf.h"
#include "kv/kv_cache.h"
#include "model/gguf_quantize.h"
#include "quant/quant.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
const char* kModels[] = {"tiny-gemma2", "tiny-gemma3", "tiny-gemma4", "tiny-gemma4-moe"};

std::string ref_file(const std::string& model, const std::string& type) {
  return egtest::shared_dir() + "/models/gguf/" + model + "/" + model + "-" + type + ".gguf";
}

std::vector<float> dequant(const eg::GGUFTensor& t) {
  std::vector<float> out(t.numel());
  const int64_t n0 = t.ne[0], rows = t.numel() / n0;
  for (int64_t r = 0; r < rows; ++r)
    eg::quant::dequantize_row(t.dtype, t.data + r * eg::dtype_row_bytes(t.dtype, n0), n0, out.data() + r * n0);
  return out;
}

/// Compares every tensor of `ours` with llama.cpp's `ref`: same set, types and shapes; bytes equal
/// for F32/Q8_0/Q4_0; for other types, our error against `f32` (the source) within 10% of theirs.
void compare_files(const std::string& ours_path, const std::string& ref_path, const eg::GGUFFile* f32) {
  auto ours = eg::GGUFFile::open(ours_path);
  auto ref = eg::GGUFFile::open(ref_path);
  ASSERT_EQ(ours->tensors().size(), ref->tensors().size()) << ours_path;
  int exact = 0, kquant = 0;
  for (const eg::GGUFTensor& r : ref->tensors()) {
    const eg::GGUFTensor* o = ours->find_tensor(r.name);
    ASSERT_NE(o, nullptr) << r.name;
    ASSERT_EQ(eg::dtype_name(o->dtype), std::string(eg::dtype_name(r.dtype))) << r.name;
    ASSERT_EQ(o->ne, r.ne) << r.name;
    ASSERT_EQ(o->nbytes, r.nbytes) << r.name;
    if (r.dtype == eg::DType::F32 || r.dtype == eg::DType::Q8_0 || r.dtype == eg::DType::Q4_0) {
      EXPECT_EQ(std::memcmp(o->data, r.data, r.nbytes), 0) << ours_path << ": " << r.name << " bytes differ";
      ++exact;
    } else if (f32) {
      const eg::GGUFTensor* s = f32->find_tensor(r.name);
      ASSERT_NE(s, nullptr);
      const std::vector<float> src = dequant(*s), a = dequant(*o), b = dequant(r);
      double ea = 0, eb = 0;
      for (size_t i = 0; i < src.size(); ++i) {
        ea += (a[i] - src[i]) * double(a[i] - src[i]);
        eb += (b[i] - src[i]) * double(b[i] - src[i]);
      }
      EXPECT_LE(ea, 1.1 * eb + 1e-12) << r.name << " (" << eg::dtype_name(r.dtype) << "): our squared error " << ea
                                      << ", llama.cpp's " << eb;
      ++kquant;
    }
  }
  EXPECT_GT(exact, 0);
  (void)kquant;
}

TEST(GgufQuantize, FromF32GgufEqualsLlamaQuantize) {
  const std::string dir = egtest::make_temp_dir();
  const std::string src = ref_file("tiny-gemma3", "f32");
  auto f32 = eg::GGUFFile::open(src);
  for (const char* t : {"q8_0", "q4_0", "q4_k_m"}) {
    eg::GGUFQuantizeOptions o;
    o.type = t;
    const std::string out = dir + "/g3-" + t + ".gguf";
    eg::quantize_to_gguf(src, out, o);
    compare_files(out, ref_file("tiny-gemma3", t), f32.get());
    // Metadata: everything llama-quantize writes, with the same values.
    auto a = eg::GGUFFile::open(out);
    auto b = eg::GGUFFile::open(ref_file("tiny-gemma3", t));
    for (const auto& [k, v] : b->metadata()) {
      const eg::GGUFValue* w = a->find(k);
      ASSERT_NE(w, nullptr) << k;
      EXPECT_EQ(w->type, v.type) << k;
      EXPECT_EQ(w->i, v.i) << k;
      EXPECT_EQ(w->s, v.s) << k;
      EXPECT_EQ(w->strs, v.strs) << k;
      EXPECT_EQ(w->ints, v.ints) << k;
      EXPECT_EQ(w->floats, v.floats) << k;
    }
  }
}

TEST(GgufQuantize, FromHfDirectoryEveryModelQ8_0AndQ4_0BytesEqual) {
  const std::string dir = egtest::make_temp_dir();
  for (const char* m : kModels) {
    for (const char* t : {"q8_0", "q4_0"}) {
      eg::GGUFQuantizeOptions o;
      o.type = t;
      const std::string out = dir + "/" + m + "-" + t + ".gguf";
      eg::quantize_to_gguf(egtest::shared_dir() + "/models/" + m, out, o);
      compare_files(out, ref_file(m, t), nullptr);  // Q6_K token embeddings: types/shapes only here
      auto g = eg::GGUFFile::open(out);
      auto r = eg::GGUFFile::open(ref_file(m, t));
      // Gemma 4: we mark non-special added tokens USER_DEFINED (llama.cpp's converter: NORMAL) so
      // that they keep HF's raw-text matching; token types are compared for Gemma 2/3 only.
      const bool g4 = std::string(m).find("gemma4") != std::string::npos;
      for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}) {
        if (g4 && std::string(k) == "tokenizer.ggml.token_type") continue;
        EXPECT_EQ(g->find(k)->strs, r->find(k)->strs) << m << " " << k;
        EXPECT_EQ(g->find(k)->ints, r->find(k)->ints) << m << " " << k;
      }
    }
  }
}

TEST(GgufQuantize, RecipeTypesEqualLlamaQuantizeForAllFiles) {
  for (const char* m : kModels) {
    const json ref = json::parse(egtest::read_file(egtest::shared_dir() + "/models/gguf/" + m + "/llamacpp-reference.json"));
    for (const char* t : {"q8_0", "q4_0", "q4_k_m"}) {
      // Types come from the recipe alone: run it over the F32 reference's tensor list (the Q8_0
      // file has the same names and shapes).
      auto g = eg::GGUFFile::open(ref_file(m, "q8_0"));
      const int L = static_cast<int>(g->get_int(g->get_string("general.architecture") + ".block_count"));
      const int E = static_cast<int>(g->get_int(g->get_string("general.architecture") + ".expert_count", 0));
      std::vector<std::pair<int, std::string>> vs;
      for (const auto& tt : g->tensors())
        if (tt.name.find("attn_v.weight") != std::string::npos) vs.emplace_back(std::stoi(tt.name.substr(4)), tt.name);
      std::sort(vs.begin(), vs.end());
      const json& types = ref["files"][std::string(m) + "-" + t + ".gguf"]["tensor_types"];
      for (const auto& tt : g->tensors()) {
        int vi = 0;
        for (size_t k = 0; k < vs.size(); ++k)
          if (vs[k].second == tt.name) vi = static_cast<int>(k);
        std::string fb;
        const eg::DType d = eg::gguf_recipe_type(t, tt.name, tt.ne, L, E, vi, static_cast<int>(vs.size()), &fb);
        EXPECT_EQ(eg::dtype_name(d), types[tt.name].get<std::string>()) << m << " " << t << " " << tt.name;
      }
    }
  }
  std::string fb;
  EXPECT_EQ(eg::gguf_recipe_type("q4_k_m", "blk.0.proj.weight", {64, 256}, 8, 0, 0, 1, &fb), eg::DType::Q5_0);
  EXPECT_NE(fb.find("Q5_0"), std::string::npos);
  EXPECT_THROW(eg::gguf_recipe_type("q3_k", "x.weight", {256, 2}, 1, 0, 0, 1, nullptr), eg::Error);
}

TEST(GgufQuantize, F32RoundTripIsIdentical) {
  const std::string out = egtest::make_temp_dir() + "/rt.gguf";
  eg::GGUFQuantizeOptions o;
  o.type = "f32";
  const std::string src = ref_file("tiny-gemma3", "f32");
  eg::quantize_to_gguf(src, out, o);
  auto a = eg::GGUFFile::open(out);
  auto b = eg::GGUFFile::open(src);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    EXPECT_EQ(a->tensors()[i].name, b->tensors()[i].name);
    ASSERT_EQ(a->tensors()[i].nbytes, b->tensors()[i].nbytes);
    EXPECT_EQ(std::memcmp(a->tensors()[i].data, b->tensors()[i].data, a->tensors()[i].nbytes), 0);
  }
  ASSERT_EQ(a->metadata().size(), b->metadata().size());
  for (size_t i = 0; i < a->metadata().size(); ++i) {
    const auto& [k, v] = b->metadata()[i];
    const eg::GGUFValue* w = a->find(k);
    ASSERT_NE(w, nullptr) << k;
    EXPECT_EQ(w->i, v.i) << k;
    EXPECT_EQ(w->s, v.s) << k;
    EXPECT_EQ(w->strs, v.strs) << k;
    EXPECT_EQ(w->floats, v.floats) << k;
  }
}

/// First-step logits of the en_bible prompt for a GGUF file.
std::vector<float> first_logits(const std::string& path, std::vector<int32_t>* ids) {
  auto lm = eg::LoadedModel::load_gguf(path);
  const json ref = json::parse(egtest::read_file(egtest::shared_dir() + "/models/gguf/tiny-gemma3/llamacpp-reference.json"));
  *ids = lm->tokenizer().encode(ref["prompts"][0]["text"].get<std::string>(), true);
  eg::KVCache kv(lm->model().config(), static_cast<int>(ids->size()) + 1);
  eg::ForwardScratch s;
  std::vector<float> logits;
  lm->model().forward(ids->data(), static_cast<int>(ids->size()), kv, s, eg::LogitsMode::Last, logits);
  return logits;
}

TEST(GgufQuantize, EgQ4G128AndAwqOutputsRunClose) {
  const std::string dir = egtest::make_temp_dir();
  std::vector<int32_t> ids, ids2;
  const std::vector<float> ref = first_logits(ref_file("tiny-gemma3", "f32"), &ids);
  const size_t top = std::max_element(ref.begin(), ref.end()) - ref.begin();
  for (int variant = 0; variant < 2; ++variant) {
    eg::GGUFQuantizeOptions o;
    o.type = variant == 0 ? "eg_q4_g128" : "q4_0";
    o.awq = variant == 1;
    o.calib_file = egtest::shared_dir() + "/data/corpus/train.txt";
    o.calib_tokens = 512;
    const std::string out = dir + "/v" + std::to_string(variant) + ".gguf";
    const eg::GGUFQuantizeReport rep = eg::quantize_to_gguf(egtest::shared_dir() + "/models/tiny-gemma3", out, o);
    EXPECT_GT(rep.bytes_written, 0u);
    const std::vector<float> got = first_logits(out, &ids2);
    EXPECT_EQ(ids2, ids);
    double max_d = 0;
    for (size_t i = 0; i < got.size(); ++i) max_d = std::max(max_d, std::fabs(double(got[i]) - ref[i]));
    EXPECT_LT(max_d, 1.5) << o.type << (o.awq ? " awq" : "");
    EXPECT_NEAR(got[top], ref[top], 0.5) << o.type;
  }
}

TEST(GgufQuantize, CliQuantizeThenRun) {
  const std::string out = egtest::make_temp_dir() + "/cli.gguf";
  auto r = egtest::run_cmd({egtest::cli_path(), "quantize", "-m", egtest::shared_dir() + "/models/tiny-gemma4", "-o",
                            out, "--type", "q4_k_m"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Q5_0 instead"), std::string::npos) << r.err;  // blk.*.proj rows of 64
  r = egtest::run_cmd({egtest::cli_path(), "run", "-m", out, "-p", "In the beginning", "-n", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"generated_ids\""), std::string::npos);
  r = egtest::run_cmd({egtest::cli_path(), "inspect", "-m", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gemma4"), std::string::npos);
  // --chat uses the GGUF's own tokenizer.chat_template (there is no tokenizer_config.json).
  r = egtest::run_cmd({egtest::cli_path(), "run", "-m", out, "--chat", "-p", "Hi", "-n", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"generated_ids\""), std::string::npos);
  r = egtest::run_cmd({egtest::cli_path(), "chat", "-m", out, "-n", "4"}, "Hello\n/stats\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The output may never replace a file of the input model, and must be a .gguf.
  const std::string copy = egtest::make_temp_dir();
  std::filesystem::copy(egtest::shared_dir() + "/models/tiny-gemma3", copy, std::filesystem::copy_options::recursive);
  const std::string st = copy + "/model.safetensors";
  const auto size_before = std::filesystem::file_size(st);
  r = egtest::run_cmd({egtest::cli_path(), "quantize", "-m", copy, "-o", st, "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a file of the input model"), std::string::npos) << r.err;
  r = egtest::run_cmd({egtest::cli_path(), "quantize", "-m", copy, "-o", copy + "/out.bin", "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("must be a .gguf"), std::string::npos) << r.err;
  std::filesystem::create_symlink(st, copy + "/link.gguf");  // a .gguf name for the weights file
  r = egtest::run_cmd({egtest::cli_path(), "quantize", "-m", copy, "-o", copy + "/link.gguf", "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a file of the input model"), std::string::npos) << r.err;
  EXPECT_EQ(std::filesystem::file_size(st), size_before);
  r = egtest::run_cmd({egtest::cli_path(), "quantize", "-m", "/nonexistent", "-o", out + "2.gguf", "--type", "q8_0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("edgegemma: error:"), std::string::npos);
}

// ---- The vocabulary has one token per embedding row (llama.cpp's check_tensor_dims) ----

/// A copy of the tiny model `m` whose tokenizer.json is changed by `edit`.
std::string tiny_copy_with_tokenizer(const std::string& m, const std::function<void(json&)>& edit) {
  const std::string dir = egtest::make_temp_dir() + "/" + m;
  std::filesystem::copy(egtest::shared_dir() + "/models/" + m, dir, std::filesystem::copy_options::recursive);
  json t = json::parse(egtest::read_file(dir + "/tokenizer.json"));
  edit(t);
  egtest::write_file(dir + "/tokenizer.json", t.dump());
  return dir;
}

/// Gemma 3 1B's case: one more special token than the embedding has rows (id = rows).
void add_image_soft_token(json& t, int id) {
  t["added_tokens"].push_back({{"id", id}, {"content", "<image_soft_token>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
}

int64_t embd_rows(const eg::GGUFFile& g) { return g.find_tensor("token_embd.weight")->ne[1]; }

/// tokens, token_type and scores (when present) all hold exactly `rows` entries.
void expect_vocab_rows(const eg::GGUFFile& g, int64_t rows, const std::string& what) {
  EXPECT_EQ(static_cast<int64_t>(g.find("tokenizer.ggml.tokens")->strs.size()), rows) << what;
  EXPECT_EQ(static_cast<int64_t>(g.find("tokenizer.ggml.token_type")->ints.size()), rows) << what;
  if (const eg::GGUFValue* sc = g.find("tokenizer.ggml.scores"))
    EXPECT_EQ(static_cast<int64_t>(sc->floats.size()), rows) << what;
}

TEST(GgufQuantize, VocabLongerThanEmbeddingIsCutToItsRows) {
  // tiny-gemma3 and tiny-gemma4 (SentencePiece and BPE vocabularies): 8192 embedding rows, and
  // a tokenizer.json with <image_soft_token> = 8192, as Gemma 3 1B's (262145 tokens, 262144 rows).
  for (const char* m : {"tiny-gemma3", "tiny-gemma4"}) {
    const std::string dir = tiny_copy_with_tokenizer(m, [](json& t) { add_image_soft_token(t, 8192); });
    const eg::Tokenizer hf = eg::Tokenizer::load_dir(dir);
    ASSERT_EQ(hf.vocab_size(), 8193) << m;
    ASSERT_EQ(hf.token_id("<image_soft_token>"), 8192) << m;
    for (const char* type : {"q8_0", "q4_0"}) {
      eg::GGUFQuantizeOptions o;
      o.type = type;
      std::vector<std::string> logs;
      o.log = [&](const std::string& l) { logs.push_back(l); };
      const std::string out = egtest::make_temp_dir() + "/v.gguf";
      eg::quantize_to_gguf(dir, out, o);
      auto g = eg::GGUFFile::open(out);
      ASSERT_EQ(embd_rows(*g), 8192) << m;
      expect_vocab_rows(*g, 8192, std::string(m) + " " + type);
      EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strs[8191], hf.piece(8191)) << m;  // ids kept as they are
      bool said = false;
      for (const std::string& l : logs) said |= l.find("dropped 1 token") != std::string::npos;
      EXPECT_TRUE(said) << m;
      // The file loads and tokenizes as the HF folder (the text has no <image_soft_token>).
      auto lm = eg::LoadedModel::load_gguf(out);
      EXPECT_EQ(lm->tokenizer().vocab_size(), 8192);
      const std::string text = "It is a truth universally acknowledged,\n\n  that <start_of_turn>x";
      EXPECT_EQ(lm->tokenizer().encode(text, true), hf.encode(text, true)) << m;
      EXPECT_EQ(lm->tokenizer().token_id("<image_soft_token>"), -1);
      for (int32_t id : lm->tokenizer().encode("<image_soft_token>", true)) EXPECT_LT(id, 8192);
      // GGUF -> GGUF keeps it.
      const std::string again = egtest::make_temp_dir() + "/again.gguf";
      o.type = "q8_0";
      eg::quantize_to_gguf(out, again, o);
      expect_vocab_rows(*eg::GGUFFile::open(again), 8192, std::string(m) + " requantized");
    }
  }
}

TEST(GgufQuantize, VocabShorterThanEmbeddingIsPadded) {
  // Gemma 3 4B's case (262145 tokens, 262208 rows): the last piece of tiny-gemma3's vocabulary
  // (and its merge) removed, so 8191 tokens for 8192 rows. llama.cpp's converter pads with
  // "[PADn]" tokens of type UNUSED (5).
  const std::string dir = tiny_copy_with_tokenizer("tiny-gemma3", [](json& t) {
    json& v = t["model"]["vocab"];
    std::string last;
    for (auto it = v.begin(); it != v.end(); ++it)
      if (it.value().get<int>() == 8191) last = it.key();
    ASSERT_FALSE(last.empty());
    v.erase(last);
    json kept = json::array();
    for (const json& mm : t["model"]["merges"]) {
      const std::string a = mm[0], b = mm[1];
      if (a + b != last && a != last && b != last) kept.push_back(mm);
    }
    t["model"]["merges"] = kept;
  });
  const eg::Tokenizer hf = eg::Tokenizer::load_dir(dir);
  ASSERT_EQ(hf.vocab_size(), 8191);
  const std::string out = egtest::make_temp_dir() + "/p.gguf";
  eg::GGUFQuantizeOptions o;
  o.type = "q8_0";
  eg::quantize_to_gguf(dir, out, o);
  auto g = eg::GGUFFile::open(out);
  expect_vocab_rows(*g, 8192, "padded");
  ASSERT_EQ(g->find("tokenizer.ggml.tokens")->strs.size(), 8192u);
  ASSERT_EQ(g->find("tokenizer.ggml.token_type")->ints.size(), 8192u);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strs[8191], "[PAD8191]");
  EXPECT_EQ(g->find("tokenizer.ggml.token_type")->ints[8191], 5);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strs[8190], hf.piece(8190));
  auto lm = eg::LoadedModel::load_gguf(out);
  const std::string text = "It is a truth universally acknowledged";
  EXPECT_EQ(lm->tokenizer().encode(text, true), hf.encode(text, true));
}

TEST(GgufQuantize, OlderGgufWithLongerVocabLoadsAndRequantizesToTheRows) {
  // A GGUF as we wrote them before: tiny-gemma3-q8_0 with <image_soft_token> appended (8193
  // tokens, 8192 rows). It still loads; the id beyond the rows is a clear error at run time, never
  // an embedding lookup; requantizing it writes the vocabulary llama.cpp accepts.
  auto src = eg::GGUFFile::open(ref_file("tiny-gemma3", "q8_0"));
  std::vector<std::pair<std::string, eg::GGUFValue>> kv;
  for (auto [k, v] : src->metadata()) {
    if (k == "tokenizer.ggml.tokens") v.strs.push_back("<image_soft_token>");
    if (k == "tokenizer.ggml.token_type") v.ints.push_back(3);
    if (k == "tokenizer.ggml.scores") v.floats.push_back(-1000.0);
    kv.emplace_back(k, v);
  }
  std::vector<eg::GGUFTensorSpec> specs;
  for (const eg::GGUFTensor& t : src->tensors()) specs.push_back({t.name, t.dtype, t.ne});
  const std::string old = egtest::make_temp_dir() + "/old.gguf";
  {
    eg::GGUFWriter w(old, kv, specs);
    for (const eg::GGUFTensor& t : src->tensors()) w.append(t.data, t.nbytes);
    w.finish();
  }
  ASSERT_EQ(eg::GGUFFile::open(old)->find("tokenizer.ggml.tokens")->strs.size(), 8193u);
  auto lm = eg::LoadedModel::load_gguf(old);
  ASSERT_EQ(lm->tokenizer().vocab_size(), 8193);
  ASSERT_EQ(lm->model().config().vocab_size, 8192);
  std::vector<int32_t> ids = lm->tokenizer().encode("Hi <image_soft_token>", true);
  ASSERT_EQ(ids.back(), 8192);
  eg::KVCache cache(lm->model().config(), 16);
  eg::ForwardScratch s;
  std::vector<float> logits;
  try {
    lm->model().forward(ids.data(), static_cast<int>(ids.size()), cache, s, eg::LogitsMode::Last, logits);
    ADD_FAILURE() << "id 8192 reached the embedding";
  } catch (const eg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  ids.pop_back();
  lm->model().forward(ids.data(), static_cast<int>(ids.size()), cache, s, eg::LogitsMode::Last, logits);
  EXPECT_EQ(logits.size(), 8192u);

  const std::string fixed = egtest::make_temp_dir() + "/fixed.gguf";
  eg::GGUFQuantizeOptions o;
  o.type = "q4_0";
  eg::quantize_to_gguf(old, fixed, o);
  auto g = eg::GGUFFile::open(fixed);
  expect_vocab_rows(*g, embd_rows(*g), "requantized");
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strs, src->find("tokenizer.ggml.tokens")->strs);
}

TEST(GgufQuantize, FitGgufVocabDropsMergesAndSpecialIdsBeyondTheRows) {
  using V = eg::GGUFValue;
  auto make = [] {
    return std::vector<std::pair<std::string, V>>{{"tokenizer.ggml.model", V::str("gemma4")},
                                                  {"tokenizer.ggml.tokens", V::str_array({"a", "b", "ab", "c", "abc"})},
                                                  {"tokenizer.ggml.token_type", V::i32_array({1, 1, 1, 1, 1})},
                                                  {"tokenizer.ggml.merges", V::str_array({"a b", "ab c"})},
                                                  {"tokenizer.ggml.bos_token_id", V::u32(1)},
                                                  {"tokenizer.ggml.eos_token_id", V::u32(4)}};
  };
  auto get = [](auto& kv, const std::string& k) -> const V* {
    for (auto& [key, v] : kv)
      if (key == k) return &v;
    return nullptr;
  };
  auto kv = make();
  EXPECT_EQ(eg::Tokenizer::fit_gguf_vocab(kv, 3), 2);
  EXPECT_EQ(get(kv, "tokenizer.ggml.tokens")->strs, (std::vector<std::string>{"a", "b", "ab"}));
  EXPECT_EQ(get(kv, "tokenizer.ggml.token_type")->ints.size(), 3u);
  EXPECT_EQ(get(kv, "tokenizer.ggml.merges")->strs, std::vector<std::string>{"a b"});
  EXPECT_NE(get(kv, "tokenizer.ggml.bos_token_id"), nullptr);
  EXPECT_EQ(get(kv, "tokenizer.ggml.eos_token_id"), nullptr);
  kv = make();
  EXPECT_EQ(eg::Tokenizer::fit_gguf_vocab(kv, 7), -2);
  EXPECT_EQ(get(kv, "tokenizer.ggml.tokens")->strs.back(), "[PAD6]");
  EXPECT_EQ(get(kv, "tokenizer.ggml.token_type")->ints, (std::vector<int64_t>{1, 1, 1, 1, 1, 5, 5}));
  EXPECT_EQ(get(kv, "tokenizer.ggml.merges")->strs.size(), 2u);
  kv = make();
  EXPECT_EQ(eg::Tokenizer::fit_gguf_vocab(kv, 5), 0);
  kv.erase(kv.begin() + 1);
  EXPECT_THROW(eg::Tokenizer::fit_gguf_vocab(kv, 5), eg::Error);
}

}  // namespace
