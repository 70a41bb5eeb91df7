// llama.cpp mmproj files (model/mmproj.h): tiny-gemma3-vision written as our text GGUF (f32) +
// mmproj (f16 / q8_0), loaded, and checked against the transformers references exactly as the
// HF-dir tests (vision_tower_test, vision_model_test) do; the file's keys, names and tensor
// modifications; bad files give clear errors and change nothing.
//
// Tolerances: tower soft tokens 3e-5 · max|ref| (the HF path's); the f16 mmproj stores the bf16
// checkpoint's matrices in f16, which holds every bf16 value of normal f16 range exactly (7 of 10
// mantissa bits), so only subnormal-range weights round: the f16 file must stay within the HF
// path's tolerance. q8_0 matrices: 2e-2 · max|ref| (8-bit blocks; measured value printed).
// Logits 1e-3 and greedy ids exact, as vision_model_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/generator.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/gguf_quantize.h"
#include "model/mmproj.h"
#include "tokenizer/chat_template.h"
#include "vision_test_util.h"

using namespace eg;

namespace {

struct Files {
  std::string dir, text, mm_f16, mm_q8;
};

const Files& files() {
  static Files f = [] {
    Files f;
    f.dir = egtest::make_temp_dir();
    f.text = f.dir + "/tiny-gemma3-vision-f32.gguf";
    f.mm_f16 = f.dir + "/mmproj-tiny-gemma3-vision-f16.gguf";
    f.mm_q8 = f.dir + "/mmproj-tiny-gemma3-vision-q8_0.gguf";
    GGUFQuantizeOptions q;
    q.type = "f32";
    quantize_to_gguf(egtest::g3v_dir(), f.text, q);
    MmprojWriteOptions o;
    o.type = "f16";
    write_mmproj(egtest::g3v_dir(), f.mm_f16, o);
    o.type = "q8_0";
    write_mmproj(egtest::g3v_dir(), f.mm_q8, o);
    return f;
  }();
  return f;
}

struct Loaded {
  std::unique_ptr<LoadedModel> lm;
  nlohmann::json ref;
  std::map<std::string, egtest::RefArray> arrays;
};

Loaded& loaded() {
  static Loaded l = [] {
    Loaded l;
    l.lm = LoadedModel::load(files().text);
    l.lm->attach_mmproj(files().mm_f16);
    l.ref = egtest::read_json(egtest::g3v_dir() + "/reference.json");
    l.arrays = egtest::read_ref_arrays(egtest::g3v_dir() + "/reference_arrays.safetensors");
    return l;
  }();
  return l;
}

vision::RgbImage ref_image(const std::string& id) {
  return vision::load_image_file(egtest::g3v_dir() + "/" + loaded().ref["images"][id]["file"].get<std::string>());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A copy of the GGUF `src` at `dst` with its metadata / tensors changed by `edit`.
void rewrite(const std::string& src, const std::string& dst,
             const std::function<void(std::vector<std::pair<std::string, GGUFValue>>&, std::vector<const GGUFTensor*>&)>& edit) {
  auto g = GGUFFile::open(src);
  auto kv = g->metadata();
  std::vector<const GGUFTensor*> ts;
  for (const auto& t : g->tensors()) ts.push_back(&t);
  edit(kv, ts);
  std::vector<GGUFTensorSpec> specs;
  for (const auto* t : ts) specs.push_back({t->name, t->dtype, t->ne});
  GGUFWriter w(dst, kv, specs);
  for (const auto* t : ts) w.append(t->data, t->nbytes);
  w.finish();
}

void set_kv(std::vector<std::pair<std::string, GGUFValue>>& kv, const std::string& key, GGUFValue v) {
  for (auto& [k, val] : kv)
    if (k == key) {
      val = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

}  // namespace

TEST(Mmproj, KeysNamesAndModificationsAreLlamaCpps) {
  auto g = GGUFFile::open(files().mm_f16);
  EXPECT_EQ(g->get_string("general.architecture"), "clip");
  EXPECT_EQ(g->get_string("general.type"), "mmproj");
  EXPECT_EQ(g->get_string("clip.projector_type"), "gemma3");
  EXPECT_TRUE(g->get_bool("clip.has_vision_encoder", false));
  EXPECT_TRUE(g->get_bool("clip.use_gelu", false));
  EXPECT_EQ(g->get_int("general.file_type"), 1);
  EXPECT_EQ(g->get_int("clip.vision.image_size"), 224);
  EXPECT_EQ(g->get_int("clip.vision.patch_size"), 14);
  EXPECT_EQ(g->get_int("clip.vision.embedding_length"), 128);
  EXPECT_EQ(g->get_int("clip.vision.feed_forward_length"), 512);
  EXPECT_EQ(g->get_int("clip.vision.block_count"), 2);
  EXPECT_EQ(g->get_int("clip.vision.attention.head_count"), 4);
  EXPECT_EQ(g->get_int("clip.vision.projection_dim"), 256);
  EXPECT_NEAR(g->get_float("clip.vision.attention.layer_norm_epsilon", 0), 1e-6, 1e-12);
  // 16x16 patches pooled to 4x4 tokens: scale 4 is llama.cpp's default, so the converter omits it.
  EXPECT_EQ(g->find("clip.vision.projector.scale_factor"), nullptr);
  ASSERT_NE(g->find("clip.vision.image_mean"), nullptr);
  EXPECT_EQ(g->find("clip.vision.image_mean")->floats, (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(g->tensors().size(), 3u + 2 * 16 + 4);
  const TensorStore hf = TensorStore::open_dir(egtest::g3v_dir());
  auto f32_of = [](const void* p, DType t, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      if (t == DType::F32) std::memcpy(&v[i], static_cast<const char*>(p) + 4 * i, 4);
      else if (t == DType::F16) { uint16_t h; std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2); v[i] = f16_to_f32(h); }
      else { uint16_t h; std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2); uint32_t u = uint32_t(h) << 16; std::memcpy(&v[i], &u, 4); }
    }
    return v;
  };
  struct Want { const char* gguf; DType t; std::vector<int64_t> ne; const char* hf; float add; };
  const Want want[] = {
      {"v.patch_embd.weight", DType::F32, {14, 14, 3, 128}, "vision_tower.vision_model.embeddings.patch_embedding.weight", 0},
      {"v.position_embd.weight", DType::F32, {128, 256}, "vision_tower.vision_model.embeddings.position_embedding.weight", 0},
      {"v.blk.1.attn_q.weight", DType::F16, {128, 128}, "vision_tower.vision_model.encoder.layers.1.self_attn.q_proj.weight", 0},
      {"v.blk.0.attn_out.bias", DType::F32, {128}, "vision_tower.vision_model.encoder.layers.0.self_attn.out_proj.bias", 0},
      {"v.blk.0.ffn_up.weight", DType::F16, {128, 512}, "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", 0},
      {"v.blk.1.ffn_down.weight", DType::F16, {512, 128}, "vision_tower.vision_model.encoder.layers.1.mlp.fc2.weight", 0},
      {"v.blk.1.ln2.bias", DType::F32, {128}, "vision_tower.vision_model.encoder.layers.1.layer_norm2.bias", 0},
      {"v.post_ln.weight", DType::F32, {128}, "vision_tower.vision_model.post_layernorm.weight", 0},
      {"mm.input_projection.weight", DType::F16, {256, 128}, "multi_modal_projector.mm_input_projection_weight", 0},
      {"mm.soft_emb_norm.weight", DType::F32, {128}, "multi_modal_projector.mm_soft_emb_norm.weight", 1.0f},
  };
  for (const Want& w : want) {
    SCOPED_TRACE(w.gguf);
    const GGUFTensor* t = g->find_tensor(w.gguf);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, w.t);
    EXPECT_EQ(t->ne, w.ne);
    std::string hn = w.hf;  // the fixture's prefix (transformers 5.17 saves "vision_tower.")
    if (!hf.find(hn) && hn.rfind("vision_tower.vision_model.", 0) == 0) hn = "vision_tower." + hn.substr(26);
    const TensorInfo* h = hf.find(hn);
    ASSERT_NE(h, nullptr);
    const auto a = f32_of(t->data, t->dtype, t->numel());
    const auto b = f32_of(h->data, h->dtype, h->numel());
    double md = 0;
    for (size_t i = 0; i < a.size(); ++i) md = std::max(md, std::abs(double(a[i]) - (double(b[i]) + w.add)));
    EXPECT_LE(md, 1e-6);  // bf16 -> f16/f32 exact here; soft_emb_norm stored as 1 + w
  }
  // q8_0: the encoder matrices quantized; rows of 128/512 fit the 32-blocks; the rest as f16.
  auto q = GGUFFile::open(files().mm_q8);
  EXPECT_EQ(q->find_tensor("v.blk.0.attn_k.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(q->find_tensor("mm.input_projection.weight")->dtype, DType::F16);
  EXPECT_EQ(q->find_tensor("v.patch_embd.weight")->dtype, DType::F32);
  EXPECT_EQ(q->get_int("general.file_type"), 7);
}

TEST(Mmproj, TowerMatchesTransformers) {
  Loaded& l = loaded();
  const ImageEncoder& enc = l.lm->image_encoder();
  EXPECT_EQ(enc.config().mm_tokens_per_image, 16);
  EXPECT_EQ(enc.marker(), "<start_of_image>");
  EXPECT_EQ(enc.config().image_token_id, 62);
  auto lm_q8 = LoadedModel::load(files().text);
  lm_q8->attach_mmproj(files().mm_q8);
  int n = 0;
  for (auto it = l.ref["images"].begin(); it != l.ref["images"].end(); ++it, ++n) {
    const auto img = ref_image(it.key());
    const auto want = l.arrays.at("img." + it.key() + ".soft_tokens").f32();
    const auto soft = enc.encode(img);
    ASSERT_EQ(soft.size(), want.size());
    const auto d = egtest::diff(soft.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 3e-5 * d.max_ref) << it.key();
    const auto soft8 = lm_q8->image_encoder().encode(img);
    const auto d8 = egtest::diff(soft8.data(), want.data(), want.size());
    EXPECT_LE(d8.max_abs, 2e-2 * d8.max_ref) << it.key();
    std::printf("%s: soft_tokens max|d| f16 mmproj %.3g, q8_0 mmproj %.3g (max %.3g)\n", it.key().c_str(), d.max_abs,
                d8.max_abs, d.max_ref);
  }
  EXPECT_EQ(n, 5);
}

TEST(Mmproj, Gemma3CasesMatchTransformers) {
  Loaded& l = loaded();
  const ImageEncoder& enc = l.lm->image_encoder();
  int n = 0;
  for (const auto& c : l.ref["cases"]) {
    const std::string id = c["id"];
    SCOPED_TRACE(id);
    std::string text;
    if (c["kind"] == "chat") {
      ChatOptions opt;
      opt.add_generation_prompt = true;
      opt.bos_token = "<bos>";
      opt.eos_token = "<eos>";
      text = ChatTemplate(l.lm->chat_template()).render(c["messages"], opt);  // the GGUF's template
    } else {
      text = c["text"].get<std::string>();
    }
    std::vector<vision::RgbImage> imgs;
    for (const auto& m : c["media"]) imgs.push_back(ref_image(m.get<std::string>()));
    const ImagePrompt p = build_image_prompt(*l.lm, enc, text, imgs, false);
    EXPECT_EQ(p.ids, c["input_ids"].get<std::vector<int32_t>>());
    const StepExecutor& ex = l.lm->executor();
    KVCacheOptions o;
    o.type = KVType::F32;
    o.max_tokens = 256;
    auto kv = ex.new_kv_cache(o);
    auto ws = ex.new_workspace();
    std::vector<float> logits;
    ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *kv, *ws, LogitsMode::Last, logits);
    const auto want = l.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 1e-3) << "max logit " << d.max_ref;
    std::printf("%s: logits_last max|d| %.3g\n", id.c_str(), d.max_abs);
    GenerateOptions g;
    g.max_new_tokens = 24;
    g.ignore_eos = true;
    g.sampling.temperature = 0.0f;
    g.kv.type = KVType::F32;
    g.media = p.spans;
    const GenerationResult r = generate(ex, p.ids, {}, g, nullptr);
    EXPECT_EQ(r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
    ++n;
  }
  EXPECT_EQ(n, 11);
}

TEST(Mmproj, NotLoadedAutomaticallyAndTextGgufIsNotAnMmproj) {
  auto lm = LoadedModel::load(files().text);  // mmproj-*.gguf lies next to it: not picked up
  EXPECT_NE(error_of([&] { lm->image_encoder(); }).find("--mmproj"), std::string::npos);
  const std::string e = error_of([&] { lm->attach_mmproj(files().text); });
  EXPECT_NE(e.find(files().text), std::string::npos) << e;
  EXPECT_NE(e.find("not 'clip'"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { lm->image_encoder(); }).find("--mmproj"), std::string::npos);  // nothing changed
}

TEST(Mmproj, BadFilesGiveClearErrors) {
  const std::string d = files().dir;
  auto expect_error = [](const std::string& path, const std::string& what) {
    const std::string e = error_of([&] { open_mmproj(path); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  // Truncated: half the bytes.
  const std::string bytes = egtest::read_file(files().mm_f16);
  egtest::write_file(d + "/trunc.gguf", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(open_mmproj(d + "/trunc.gguf"), Error);
  egtest::write_file(d + "/trunc2.gguf", bytes.substr(0, 100));
  EXPECT_THROW(open_mmproj(d + "/trunc2.gguf"), Error);
  // Projector types.
  // A Gemma 3 file relabelled Gemma 4: its tensors do not fit (mmproj_gemma4_test has the real ones).
  rewrite(files().mm_f16, d + "/g4.gguf", [](auto& kv, auto&) { set_kv(kv, "clip.projector_type", GGUFValue::str("gemma4v")); });
  expect_error(d + "/g4.gguf", "tensor 'v.position_embd.weight'");
  rewrite(files().mm_f16, d + "/llava.gguf", [](auto& kv, auto&) { set_kv(kv, "clip.projector_type", GGUFValue::str("mlp")); });
  expect_error(d + "/llava.gguf", "'mlp' is not a Gemma 3 or Gemma 4 projector");
  // A missing tensor, an extra one, a key that disagrees with the shapes, a missing key.
  rewrite(files().mm_f16, d + "/missing.gguf", [](auto&, auto& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const GGUFTensor* t) { return t->name == "v.blk.1.ffn_down.weight"; }), ts.end());
  });
  expect_error(d + "/missing.gguf", "missing tensor 'v.blk.1.ffn_down.weight'");
  rewrite(files().mm_f16, d + "/ff.gguf", [](auto& kv, auto&) { set_kv(kv, "clip.vision.feed_forward_length", GGUFValue::u32(256)); });
  expect_error(d + "/ff.gguf", "tensor 'v.blk.0.ffn_up.weight': shape [512, 128], expected [256, 128]");
  rewrite(files().mm_f16, d + "/dim.gguf", [](auto& kv, auto&) { set_kv(kv, "clip.vision.projection_dim", GGUFValue::u32(512)); });
  expect_error(d + "/dim.gguf", "mm.input_projection.weight");
  rewrite(files().mm_f16, d + "/nokey.gguf", [](auto& kv, auto&) {
    kv.erase(std::remove_if(kv.begin(), kv.end(), [](const auto& p) { return p.first == "clip.vision.block_count"; }), kv.end());
  });
  expect_error(d + "/nokey.gguf", "clip.vision.block_count");
  rewrite(files().mm_f16, d + "/scale.gguf", [](auto& kv, auto&) { set_kv(kv, "clip.vision.projector.scale_factor", GGUFValue::u32(3)); });
  expect_error(d + "/scale.gguf", "does not pool the 16x16 patch grid");
  // The loaded model keeps its working mmproj after a failed attach.
  auto lm = LoadedModel::load(files().text);
  lm->attach_mmproj(files().mm_f16);
  EXPECT_THROW(lm->attach_mmproj(d + "/missing.gguf"), Error);
  EXPECT_EQ(lm->mmproj_path(), files().mm_f16);
  EXPECT_EQ(lm->image_encoder().config().mm_tokens_per_image, 16);
}

TEST(Mmproj, WrongTextModelIsAClearError) {
  // A Gemma 3 mmproj with a Gemma 4 text model.
  auto g4 = LoadedModel::load(egtest::g4mm_dir());
  std::string e = error_of([&] { g4->attach_mmproj(files().mm_f16); });  // refused when attached
  EXPECT_NE(e.find(files().mm_f16), std::string::npos) << e;
  EXPECT_NE(e.find("does not belong to this Gemma 4 text model"), std::string::npos) << e;
  // The writer refuses what it cannot write.
  e = error_of([&] { write_mmproj(egtest::shared_dir() + "/models/tiny-gemma3", files().dir + "/x.gguf", {}); });
  EXPECT_NE(e.find("has no vision tower"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(files().dir + "/x.gguf"));
  // A Gemma 3 mmproj has no audio tower.
  e = error_of([&] { loaded().lm->audio_encoder(); });
  EXPECT_NE(e.find("this model has no audio tower"), std::string::npos) << e;
}

TEST(Mmproj, CliQuantizeAndRun) {
  const std::string d = egtest::make_temp_dir();
  auto q = egtest::run_cmd({egtest::cli_path(), "quantize", "-q", "-m", egtest::g3v_dir(), "--mmproj", d + "/mm.gguf"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("wrote " + d + "/mm.gguf"), std::string::npos) << q.out;
  const std::string img = egtest::g3v_dir() + "/" + loaded().ref["images"].begin().value()["file"].get<std::string>();
  auto run = [&](const std::vector<std::string>& model) {
    std::vector<std::string> a = {egtest::cli_path(), "run"};
    a.insert(a.end(), model.begin(), model.end());
    for (const char* s : {"-p", "<start_of_image> describe", "-n", "8", "--image"}) a.push_back(s);
    a.push_back(img);
    return egtest::run_cmd(a);
  };
  const auto hf = run({"-m", egtest::g3v_dir()});
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const auto gg = run({"-m", files().text, "--mmproj", d + "/mm.gguf"});
  ASSERT_EQ(gg.exit_code, 0) << gg.err;
  EXPECT_EQ(gg.out, hf.out);
  const auto none = run({"-m", files().text});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("--mmproj"), std::string::npos) << none.err;
}

TEST(Mmproj, CApiLoadsTextGgufWithMmproj) {
  const std::string img = egtest::g3v_dir() + "/" + loaded().ref["images"].begin().value()["file"].get<std::string>();
  eg_session_params p;
  eg_session_params_default(&p);
  eg_model* m = nullptr;
  ASSERT_EQ(eg_model_load_mmproj(files().text.c_str(), files().mm_f16.c_str(), "cpu", &m), EG_OK) << eg_last_error();
  eg_session* s = nullptr;
  ASSERT_EQ(eg_session_create(m, &p, &s), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_add_image(s, img.c_str()), EG_OK) << eg_last_error();
  eg_session_free(s);
  eg_model_free(m);
  // Without the mmproj: no vision tower.
  ASSERT_EQ(eg_model_load_mmproj(files().text.c_str(), nullptr, "cpu", &m), EG_OK) << eg_last_error();
  ASSERT_EQ(eg_session_create(m, &p, &s), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_add_image(s, img.c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("--mmproj"), std::string::npos) << eg_last_error();
  eg_session_free(s);
  eg_model_free(m);
  // A text GGUF as the mmproj: a clear error, no handle.
  m = reinterpret_cast<eg_model*>(1);
  EXPECT_EQ(eg_model_load_mmproj(files().text.c_str(), files().text.c_str(), "cpu", &m), EG_ERR_FAILED);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(eg_last_error()).find("not 'clip'"), std::string::npos) << eg_last_error();
}
