// Gemma 4 mmproj files (model/mmproj.h, projector types gemma4v + gemma4a): tiny-gemma4-mm
// written as our f32 text GGUF + mmproj (f32 / f16 / q8_0), and checked
//   * against llama.cpp's layout: keys, names (listed here from gguf-py's tensor_mapping.py for
//     this checkpoint), types, and the converter's transforms, each checked element by element
//     against the checkpoint indexed independently (patch kernel [Hv, 3, ps, ps] vs the HF
//     [Hv, ps·ps·3] (y, x, c) rows; per_dim_scale = softplus(w); the squeezed depthwise conv);
//   * read back: every tower tensor equal to the checkpoint's after the inverse transforms, and the
//     transforms shown to matter (the raw stored layouts move the towers' outputs far off);
//   * against transformers 5.17 exactly as the HF-dir tests do (vision_gemma4_tower_test,
//     audio_tower_test, vision_gemma4_model_test, audio_model_test): tower outputs ≤ 3e-5·max|ref|,
//     last-position logits ≤ 1e-3 and 24 greedy ids on all 16 image / audio cases.
// Looser tolerances, stated: the f16 file keeps the bf16 checkpoint's values exactly in f16's
// normal range (only |w| < 6.1e-5 round, by < 3e-8), so it stays within the HF tolerances (towers
// and logits). q8_0 (8-bit blocks of 32; each weight within max|block|/254 of the checkpoint,
// checked): vision soft tokens / tower_hidden ≤ 1e-1·max|ref|, audio ≤ 5e-2·max|ref| (measured
// 4–7 % and 2–3 %: the untrained towers amplify weight noise, the vision attention most, with its
// scale 1 and q/k norms: one q_proj alone in q8_0 moves the soft tokens by 3.6 %), and the logits
// of the image + audio case ≤ 0.1 (measured 0.018 of a max of 14).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "engine/audio_prompt.h"
#include "engine/generator.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "format/safetensors.h"
#include "mmproj_gemma4_util.h"
#include "tokenizer/chat_template.h"

using namespace eg;

namespace {

struct Loaded {
  std::unique_ptr<LoadedModel> lm;
  nlohmann::json ref;
  std::map<std::string, egtest::RefArray> arrays;
};

Loaded& loaded() {
  static Loaded l = [] {
    Loaded l;
    l.lm = LoadedModel::load(egtest::g4_files().text);
    l.lm->attach_mmproj(egtest::g4_files().mm_f32);
    l.ref = egtest::read_json(egtest::g4mm_dir() + "/reference.json");
    l.arrays = egtest::read_ref_arrays(egtest::g4mm_dir() + "/reference_arrays.safetensors");
    return l;
  }();
  return l;
}

const TensorStore& hf() {
  static const TensorStore s = TensorStore::open_dir(egtest::g4mm_dir());
  return s;
}

std::vector<float> values(const void* p, DType t, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  cpu::to_f32(p, t, v.size(), v.data());
  return v;
}
std::vector<float> values(const TensorInfo& t) { return values(t.data, t.dtype, t.numel()); }
std::vector<float> values(const GGUFTensor& t) { return values(t.data, t.dtype, t.numel()); }

vision::RgbImage ref_image(const std::string& id) {
  return vision::load_image_file(egtest::g4mm_dir() + "/" + loaded().ref["images"][id]["file"].get<std::string>());
}

bool is_tower(const std::string& n) {
  for (const char* p : {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio."})
    if (n.rfind(p, 0) == 0) return true;
  return false;
}

// The vision tower output for one image from `store` (soft tokens; tower_hidden into *hidden).
std::vector<float> vision_soft(const Mmproj& m, const TensorStore& store, const std::string& id, std::vector<float>* hidden) {
  const vision::Gemma4VisionTower tower(m.vision, store);
  std::vector<float> soft;
  tower.encode(vision::gemma4_patches(ref_image(id), m.processor), soft, hidden);
  return soft;
}

std::vector<float> audio_soft(const Mmproj& m, const TensorStore& store, const std::string& id, std::vector<float>* hidden) {
  const audio::Gemma4AudioTower tower(m.audio, store);
  const auto feats = loaded().arrays.at("aud." + id + ".input_features").f32();
  std::vector<float> soft;
  tower.encode(feats.data(), loaded().ref["audio"][id]["num_valid_frames"].get<int>(), 128, soft, hidden);
  return soft;
}

// A copy of m.store with the tensor `name` replaced by `v` (F32, shape `shape`); the others stay
// owned by `m`, which must outlive the copy.
TensorStore with_tensor(const Mmproj& m, const std::string& name, std::shared_ptr<std::vector<float>> v,
                        std::vector<int64_t> shape) {
  TensorStore s;
  for (const std::string& n : m.store.names()) {
    TensorInfo t = *m.store.find(n);
    if (n != name) {
      s.add_external(t, nullptr);
      continue;
    }
    t.dtype = DType::F32;
    t.shape = std::move(shape);
    t.data = reinterpret_cast<const uint8_t*>(v->data());
    t.nbytes = v->size() * 4;
    s.add_external(t, v);
  }
  return s;
}

}  // namespace

TEST(Gemma4Mmproj, KeysNamesAndTypesAreLlamaCpps) {
  const auto& f = egtest::g4_files();
  auto g = GGUFFile::open(f.mm_f16);
  EXPECT_EQ(g->get_string("general.architecture"), "clip");
  EXPECT_EQ(g->get_string("general.type"), "mmproj");
  EXPECT_EQ(g->get_int("general.file_type"), 1);
  EXPECT_EQ(g->find("clip.projector_type"), nullptr);  // per-modality projector types only
  EXPECT_EQ(g->get_string("clip.vision.projector_type"), "gemma4v");
  EXPECT_EQ(g->get_string("clip.audio.projector_type"), "gemma4a");
  EXPECT_TRUE(g->get_bool("clip.has_vision_encoder", false));
  EXPECT_TRUE(g->get_bool("clip.has_audio_encoder", false));
  // config.json: vision hidden 128, intermediate 512, 2 layers, 4 heads, patch 16; audio hidden
  // 128, 2 layers, 4 heads; text hidden 256.
  const std::pair<const char*, int64_t> ints[] = {
      {"clip.vision.image_size", 224}, {"clip.vision.patch_size", 16}, {"clip.vision.embedding_length", 128},
      {"clip.vision.feed_forward_length", 512}, {"clip.vision.block_count", 2}, {"clip.vision.attention.head_count", 4},
      {"clip.vision.projection_dim", 256}, {"clip.audio.embedding_length", 128}, {"clip.audio.feed_forward_length", 512},
      {"clip.audio.block_count", 2}, {"clip.audio.attention.head_count", 4}, {"clip.audio.projection_dim", 256},
      {"clip.audio.num_mel_bins", 128}};
  for (const auto& [k, v] : ints) EXPECT_EQ(g->get_int(k), v) << k;
  EXPECT_NEAR(g->get_float("clip.vision.attention.layer_norm_epsilon", 0), 1e-6, 1e-12);
  EXPECT_NEAR(g->get_float("clip.audio.attention.layer_norm_epsilon", 0), 1e-5, 1e-11);
  EXPECT_EQ(g->find("clip.vision.projector.scale_factor"), nullptr);  // pooling 3: llama.cpp's default
  EXPECT_EQ(g->find("clip.vision.image_mean")->floats, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(g->find("clip.vision.image_std")->floats, (std::vector<double>{1, 1, 1}));
  // 85 vision tensors (2 embeddings, 41 per layer, the projection) + 132 audio (5, 62 per layer, 3).
  EXPECT_EQ(g->tensors().size(), 217u);
  struct Want { const char* name; DType f16, q8; std::vector<int64_t> ne; };
  const Want want[] = {
      {"v.patch_embd.weight", DType::F16, DType::F32, {16, 16, 3, 128}},
      {"v.position_embd.weight", DType::F32, DType::F32, {128, 1024, 2}},
      {"v.blk.0.attn_q.weight", DType::F16, DType::Q8_0, {128, 128}},
      {"v.blk.0.attn_q.input_min", DType::F32, DType::F32, {1}},
      {"v.blk.1.ffn_gate.weight", DType::F16, DType::Q8_0, {128, 512}},
      {"v.blk.1.ffn_down.output_max", DType::F32, DType::F32, {1}},
      {"v.blk.1.attn_k_norm.weight", DType::F32, DType::F32, {32}},
      {"v.blk.0.ffn_post_norm.weight", DType::F32, DType::F32, {128}},
      {"mm.input_projection.weight", DType::F16, DType::Q8_0, {128, 256}},
      {"a.conv1d.0.weight", DType::F32, DType::F32, {3, 3, 1, 128}},
      {"a.conv1d.1.weight", DType::F32, DType::F32, {3, 3, 128, 16}},
      {"a.conv1d.1.norm.weight", DType::F32, DType::F32, {16}},
      {"a.input_projection.weight", DType::F32, DType::F32, {512, 128}},
      {"a.blk.0.ffn_up.weight", DType::F16, DType::Q8_0, {128, 512}},
      {"a.blk.1.ffn_down_1.weight", DType::F16, DType::Q8_0, {512, 128}},
      {"a.blk.0.attn_k_rel.weight", DType::F16, DType::Q8_0, {128, 128}},
      {"a.blk.0.per_dim_scale.weight", DType::F32, DType::F32, {32}},
      {"a.blk.1.conv_dw.weight", DType::F32, DType::F32, {5, 128}},
      {"a.blk.1.conv_pw1.weight", DType::F16, DType::Q8_0, {128, 256}},
      {"a.blk.0.attn_out.input_max", DType::F32, DType::F32, {1}},
      {"a.pre_encode.out.weight", DType::F16, DType::Q8_0, {128, 192}},
      {"a.pre_encode.out.bias", DType::F32, DType::F32, {192}},
      {"mm.a.input_projection.weight", DType::F16, DType::Q8_0, {192, 256}},
  };
  auto q = GGUFFile::open(f.mm_q8);
  auto f32 = GGUFFile::open(f.mm_f32);
  for (const Want& w : want) {
    SCOPED_TRACE(w.name);
    for (const auto& [file, type] : {std::pair{g.get(), w.f16}, std::pair{q.get(), w.q8}, std::pair{f32.get(), DType::F32}}) {
      const GGUFTensor* t = file->find_tensor(w.name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->dtype, type);
      EXPECT_EQ(t->ne, w.ne);
    }
  }
}

// The GGUF names of the checkpoint's tensors, from gguf-py's tensor_mapping.py (the converter's
// renames applied), and the stored values against the checkpoint, indexed independently.
TEST(Gemma4Mmproj, StoredTensorsAreTheConvertersTransforms) {
  auto g = GGUFFile::open(egtest::g4_files().mm_f32);
  const std::pair<const char*, const char*> names[] = {
      {"v.blk.0.ln1.weight", "model.vision_tower.encoder.layers.0.input_layernorm.weight"},
      {"v.blk.0.ln2.weight", "model.vision_tower.encoder.layers.0.pre_feedforward_layernorm.weight"},
      {"v.blk.1.attn_post_norm.weight", "model.vision_tower.encoder.layers.1.post_attention_layernorm.weight"},
      {"v.blk.1.ffn_post_norm.weight", "model.vision_tower.encoder.layers.1.post_feedforward_layernorm.weight"},
      {"v.blk.0.attn_out.weight", "model.vision_tower.encoder.layers.0.self_attn.o_proj.linear.weight"},
      {"v.blk.1.attn_v.output_min", "model.vision_tower.encoder.layers.1.self_attn.v_proj.output_min"},
      {"v.blk.0.ffn_up.input_max", "model.vision_tower.encoder.layers.0.mlp.up_proj.input_max"},
      {"v.position_embd.weight", "model.vision_tower.patch_embedder.position_embedding_table"},
      {"mm.input_projection.weight", "model.embed_vision.embedding_projection.weight"},
      {"a.blk.0.ffn_norm.weight", "model.audio_tower.layers.0.feed_forward1.pre_layer_norm.weight"},
      {"a.blk.1.ffn_post_norm_1.weight", "model.audio_tower.layers.1.feed_forward2.post_layer_norm.weight"},
      {"a.blk.0.conv_norm.weight", "model.audio_tower.layers.0.lconv1d.pre_layer_norm.weight"},
      {"a.blk.0.norm_conv.weight", "model.audio_tower.layers.0.lconv1d.conv_norm.weight"},
      {"a.blk.1.ln2.weight", "model.audio_tower.layers.1.norm_out.weight"},
      {"a.blk.1.attn_pre_norm.weight", "model.audio_tower.layers.1.norm_pre_attn.weight"},
      {"a.blk.0.attn_out.weight", "model.audio_tower.layers.0.self_attn.post.linear.weight"},
      {"a.blk.1.conv_pw2.output_max", "model.audio_tower.layers.1.lconv1d.linear_end.output_max"},
      {"a.blk.0.attn_k_rel.weight", "model.audio_tower.layers.0.self_attn.relative_k_proj.weight"},
      {"a.conv1d.1.norm.weight", "model.audio_tower.subsample_conv_projection.layer1.norm.weight"},
      {"a.input_projection.weight", "model.audio_tower.subsample_conv_projection.input_proj_linear.weight"},
      {"a.pre_encode.out.bias", "model.audio_tower.output_proj.bias"},
      {"mm.a.input_projection.weight", "model.embed_audio.embedding_projection.weight"},
      {"a.blk.1.conv_dw.weight", "model.audio_tower.layers.1.lconv1d.depthwise_conv1d.weight"},  // [128,1,5] -> [128,5]: same order
      {"a.conv1d.0.weight", "model.audio_tower.subsample_conv_projection.layer0.conv.weight"},
  };
  for (const auto& [gn, hn] : names) {
    SCOPED_TRACE(gn);
    const GGUFTensor* t = g->find_tensor(gn);
    const TensorInfo* h = hf().find(hn);
    ASSERT_NE(t, nullptr);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(values(*t), values(*h));  // bf16 -> f32: exact
  }
  // Patch embedding: stored[o][c][y][x] (ne = [x, y, c, o]) = hf[o][(y·16 + x)·3 + c].
  const auto st = values(*g->find_tensor("v.patch_embd.weight"));
  const auto hp = values(*hf().find("model.vision_tower.patch_embedder.input_proj.weight"));
  ASSERT_EQ(st.size(), hp.size());
  size_t bad = 0;
  for (int o = 0; o < 128; ++o)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 16; ++y)
        for (int x = 0; x < 16; ++x) bad += st[((o * 3 + c) * 16 + y) * 16 + x] != hp[o * 768 + (y * 16 + x) * 3 + c];
  EXPECT_EQ(bad, 0u);
  EXPECT_NE(st, hp);  // the layouts differ: the check above can fail
  EXPECT_EQ(st[1], hp[3]);  // x = 1 of channel 0 in row 0: hf (y 0, x 1, c 0)
  // per_dim_scale: stored softplus(w).
  for (int l = 0; l < 2; ++l) {
    const auto s = values(*g->find_tensor("a.blk." + std::to_string(l) + ".per_dim_scale.weight"));
    const auto w = values(*hf().find("model.audio_tower.layers." + std::to_string(l) + ".self_attn.per_dim_scale"));
    ASSERT_EQ(s.size(), 32u);
    for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], std::log1p(std::exp(double(w[i]))), 1e-6) << i;
  }
  // Scalars: [1] in the file, [] in the checkpoint.
  const TensorInfo* b = hf().find("model.audio_tower.layers.0.self_attn.q_proj.input_min");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->shape.empty());
  EXPECT_EQ(values(*g->find_tensor("a.blk.0.attn_q.input_min")), values(*b));
}

TEST(Gemma4Mmproj, ReadBackEqualsTheCheckpoint) {
  const Mmproj m = open_mmproj(egtest::g4_files().mm_f32);
  EXPECT_TRUE(m.has_vision);
  EXPECT_TRUE(m.has_audio);
  EXPECT_EQ(m.projector_type, "gemma4v");
  EXPECT_EQ(m.audio_projector_type, "gemma4a");
  // The configs the HF path reads from config.json, here from the keys and shapes.
  const vision::VisionConfig hv = vision::load_vision_config(egtest::g4mm_dir());
  EXPECT_EQ(m.vision.hidden, hv.hidden);
  EXPECT_EQ(m.vision.head_dim, hv.head_dim);
  EXPECT_EQ(m.vision.position_embedding_size, hv.position_embedding_size);
  EXPECT_EQ(m.vision.pooling_kernel, hv.pooling_kernel);
  EXPECT_EQ(m.vision.text_hidden, hv.text_hidden);
  EXPECT_EQ(m.vision.standardize, hv.standardize);
  EXPECT_FALSE(m.processor.do_normalize);
  EXPECT_EQ(m.processor.max_soft_tokens, 280);
  const audio::AudioConfig ha = audio::load_audio_config(egtest::g4mm_dir());
  EXPECT_EQ(m.audio.conv_channels, ha.conv_channels);
  EXPECT_EQ(m.audio.conv_kernel, ha.conv_kernel);
  EXPECT_EQ(m.audio.output_dims, ha.output_dims);
  EXPECT_EQ(m.audio.hidden, ha.hidden);
  EXPECT_EQ(m.audio.text_hidden, ha.text_hidden);
  // Every tower tensor of the checkpoint, under its name and shape, with its values (the
  // converter's transforms undone); nothing else.
  size_t n = 0;
  for (const std::string& name : hf().names()) {
    if (!is_tower(name)) continue;
    SCOPED_TRACE(name);
    const TensorInfo& h = *hf().find(name);
    const TensorInfo* t = m.store.find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->shape, h.shape);
    const auto a = values(*t), b = values(h);
    ASSERT_EQ(a.size(), b.size());
    const bool softplus = name.find("per_dim_scale") != std::string::npos;
    for (size_t i = 0; i < a.size(); ++i) {
      if (softplus) EXPECT_NEAR(a[i], b[i], 1e-6 * std::max(1.0f, std::abs(b[i])));  // through log1p/expm1
      else if (a[i] != b[i]) ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
    ++n;
  }
  EXPECT_EQ(n, m.store.names().size());
  EXPECT_EQ(n, 217u);
}

// Without the inverse transforms (the file's layouts taken as they are) the towers are far off.
TEST(Gemma4Mmproj, TheInverseTransformsMatter) {
  const Mmproj m = open_mmproj(egtest::g4_files().mm_f32);
  auto g = GGUFFile::open(egtest::g4_files().mm_f32);
  const std::string img = "img_gradient_224x224", aud = "aud_chirp_1p3s";
  const auto want_v = loaded().arrays.at("img." + img + ".soft_tokens").f32();
  const auto want_a = loaded().arrays.at("aud." + aud + ".soft_tokens").f32();
  auto raw = [&](const char* gname) { return std::make_shared<std::vector<float>>(values(*g->find_tensor(gname))); };
  auto d = [](const std::vector<float>& a, const std::vector<float>& b) {
    return egtest::diff(a.data(), b.data(), b.size());
  };
  EXPECT_LE(d(vision_soft(m, m.store, img, nullptr), want_v).max_abs, 3e-5 * d(want_v, want_v).max_ref);
  const auto pv = vision_soft(m, with_tensor(m, "model.vision_tower.patch_embedder.input_proj.weight",
                                             raw("v.patch_embd.weight"), {128, 768}),
                              img, nullptr);
  EXPECT_GT(d(pv, want_v).max_abs, 1e-2 * d(want_v, want_v).max_ref);
  EXPECT_LE(d(audio_soft(m, m.store, aud, nullptr), want_a).max_abs, 3e-5 * d(want_a, want_a).max_ref);
  const auto pa = audio_soft(m, with_tensor(m, "model.audio_tower.layers.0.self_attn.per_dim_scale",
                                            raw("a.blk.0.per_dim_scale.weight"), {32}),
                             aud, nullptr);
  EXPECT_GT(d(pa, want_a).max_abs, 1e-3 * d(want_a, want_a).max_ref);
}

TEST(Gemma4Mmproj, TowersMatchTransformers) {
  Loaded& l = loaded();
  const auto& f = egtest::g4_files();
  struct Tol { const std::string* path; double vision, audio; };
  for (const Tol& tt : {Tol{&f.mm_f32, 3e-5, 3e-5}, Tol{&f.mm_f16, 3e-5, 3e-5}, Tol{&f.mm_q8, 1e-1, 5e-2}}) {
    const std::string& path = *tt.path;
    SCOPED_TRACE(path);
    const Mmproj m = open_mmproj(path);
    double tol = tt.vision;
    for (auto it = l.ref["images"].begin(); it != l.ref["images"].end(); ++it) {
      std::vector<float> hidden;
      const auto soft = vision_soft(m, m.store, it.key(), &hidden);
      const auto ws = l.arrays.at("img." + it.key() + ".soft_tokens").f32();
      const auto wh = l.arrays.at("img." + it.key() + ".tower_hidden").f32();
      ASSERT_EQ(soft.size(), ws.size());
      ASSERT_EQ(hidden.size(), wh.size());
      const auto ds = egtest::diff(soft.data(), ws.data(), ws.size()), dh = egtest::diff(hidden.data(), wh.data(), wh.size());
      EXPECT_LE(ds.max_abs, tol * ds.max_ref) << it.key();
      EXPECT_LE(dh.max_abs, tol * dh.max_ref) << it.key();
      std::printf("%s %s: soft max|d| %.3g (max %.3g), tower_hidden max|d| %.3g\n", path.substr(path.rfind('-') + 1).c_str(),
                  it.key().c_str(), ds.max_abs, ds.max_ref, dh.max_abs);
    }
    tol = tt.audio;
    for (const char* id : {"aud_chirp_1p3s", "aud_tone_noise_4p7s"}) {
      std::vector<float> hidden;
      const auto soft = audio_soft(m, m.store, id, &hidden);
      const auto ws = l.arrays.at(std::string("aud.") + id + ".soft_tokens").f32();
      const auto wh = l.arrays.at(std::string("aud.") + id + ".tower_hidden").f32();
      ASSERT_EQ(soft.size(), ws.size());
      ASSERT_EQ(hidden.size(), wh.size());
      const auto ds = egtest::diff(soft.data(), ws.data(), ws.size()), dh = egtest::diff(hidden.data(), wh.data(), wh.size());
      EXPECT_LE(ds.max_abs, tol * ds.max_ref) << id;
      EXPECT_LE(dh.max_abs, tol * dh.max_ref) << id;
      std::printf("%s %s: soft max|d| %.3g (max %.3g), tower_hidden max|d| %.3g\n", path.substr(path.rfind('-') + 1).c_str(),
                  id, ds.max_abs, ds.max_ref, dh.max_abs);
    }
  }
  // Through the encoders the model uses (processor / feature extractor from the mmproj's settings).
  const ImageEncoder& ie = l.lm->image_encoder();
  EXPECT_TRUE(ie.gemma4());
  EXPECT_EQ(ie.marker(), "<|image|>");
  EXPECT_EQ(ie.config().image_token_id, 62);
  EXPECT_EQ(ie.config().boi_id, 60);
  EXPECT_EQ(ie.config().eoi_id, 64);
  const auto img = ref_image("img_shapes_640x480");
  const auto want = l.arrays.at("img.img_shapes_640x480.soft_tokens").f32();
  const auto soft = ie.encode(img);
  ASSERT_EQ(soft.size(), want.size());
  EXPECT_LE(egtest::diff(soft.data(), want.data(), want.size()).max_abs,
            3e-5 * egtest::diff(want.data(), want.data(), want.size()).max_ref);
  const AudioEncoder& ae = l.lm->audio_encoder();
  EXPECT_EQ(ae.marker(), "<|audio|>");
  EXPECT_EQ(ae.config().boa_id, 61);
  EXPECT_EQ(ae.config().eoa_id, 65);
  EXPECT_EQ(ae.config().audio_token_id, 63);
  const auto pcm = audio::to_model_rate(audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s")));
  const auto as = ae.encode(pcm);
  const auto aw = l.arrays.at("aud.aud_chirp_1p3s.soft_tokens").f32();
  ASSERT_EQ(as.size(), aw.size());
  EXPECT_LE(egtest::diff(as.data(), aw.data(), aw.size()).max_abs, 3e-5 * egtest::diff(aw.data(), aw.data(), aw.size()).max_ref);
}

TEST(Gemma4Mmproj, CasesMatchTransformers) {
  Loaded& l = loaded();
  int n = 0;
  double worst = 0;
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
    std::vector<PromptMedium> media;
    bool images = false, clips = false;
    for (const auto& j : c["media"]) {
      const std::string mid = j;
      PromptMedium pm;
      if (mid.rfind("aud_", 0) == 0) {
        pm.kind = PromptMedium::Kind::Audio;
        pm.audio = audio::to_model_rate(audio::load_audio_file(egtest::clip_path(mid)));
        clips = true;
      } else {
        pm.image = ref_image(mid);
        images = true;
      }
      media.push_back(std::move(pm));
    }
    const MediaPrompt p = build_media_prompt(*l.lm, images ? &l.lm->image_encoder() : nullptr,
                                             clips ? &l.lm->audio_encoder() : nullptr, text, media, false);
    EXPECT_EQ(p.ids, c["input_ids"].get<std::vector<int32_t>>());
    const StepExecutor& ex = l.lm->executor();
    KVCacheOptions o;
    o.type = KVType::F32;
    o.max_tokens = 1024;
    auto kv = ex.new_kv_cache(o);
    auto ws = ex.new_workspace();
    std::vector<float> logits;
    ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *kv, *ws, LogitsMode::Last, logits);
    const auto want = l.arrays.at(c["arrays"]["logits_last"].get<std::string>()).f32();
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, 1e-3) << "max logit " << d.max_ref;
    worst = std::max(worst, d.max_abs);
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
  EXPECT_EQ(n, 16);
  std::printf("worst logits_last max|d| %.3g over %d cases (f32 text GGUF + f32 mmproj)\n", worst, n);
}

// The q8_0 file's matrices: each weight within half a quantization step (max|block| / 254, f16
// scale rounding allowed for) of the checkpoint's; so the towers' larger q8_0 error above is the
// weights' 8 bits, not a layout fault.
TEST(Gemma4Mmproj, Q8MatricesAreTheCheckpointsWithinAStep) {
  const Mmproj q = open_mmproj(egtest::g4_files().mm_q8);
  int n = 0;
  for (const std::string& name : q.store.names()) {
    const TensorInfo& t = *q.store.find(name);
    if (t.dtype != DType::Q8_0) continue;
    SCOPED_TRACE(name);
    const auto a = values(t), b = values(*hf().find(name));
    ASSERT_EQ(a.size(), b.size());
    for (size_t blk = 0; blk < b.size(); blk += 32) {
      float mx = 0;
      for (size_t i = blk; i < blk + 32; ++i) mx = std::max(mx, std::abs(b[i]));
      for (size_t i = blk; i < blk + 32; ++i)
        if (!(std::abs(a[i] - b[i]) <= mx / 220.0f + 1e-7f)) {
          ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
          return;
        }
    }
    ++n;
  }
  EXPECT_EQ(n, 15 + 24);  // vision: 7 per layer + the projection; audio: 11 per layer + output_proj + projection
}

// The f16 and q8_0 files on the image + audio case: f16 within the HF tolerance (logits 1e-3,
// greedy ids exact), q8_0 within its stated logit tolerance.
TEST(Gemma4Mmproj, F16AndQ8CaseLogits) {
  Loaded& l = loaded();
  const nlohmann::json* c = nullptr;
  for (const auto& x : l.ref["cases"])
    if (x["id"] == "chat.image_and_audio") c = &x;
  ASSERT_TRUE(c);
  ChatOptions opt;
  opt.add_generation_prompt = true;
  opt.bos_token = "<bos>";
  opt.eos_token = "<eos>";
  const std::string text = ChatTemplate(l.lm->chat_template()).render((*c)["messages"], opt);
  std::vector<PromptMedium> media(2);
  media[0].image = ref_image("img_checker_300x800");
  media[1].kind = PromptMedium::Kind::Audio;
  media[1].audio = audio::to_model_rate(audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s")));
  const auto want = l.arrays.at((*c)["arrays"]["logits_last"].get<std::string>()).f32();
  for (const auto& [path, tol] : {std::pair{egtest::g4_files().mm_f16, 1e-3}, std::pair{egtest::g4_files().mm_q8, 0.1}}) {
    SCOPED_TRACE(path);
    auto lm = LoadedModel::load(egtest::g4_files().text);
    lm->attach_mmproj(path);
    const MediaPrompt p = build_media_prompt(*lm, &lm->image_encoder(), &lm->audio_encoder(), text, media, false);
    EXPECT_EQ(p.ids, (*c)["input_ids"].get<std::vector<int32_t>>());
    const StepExecutor& ex = lm->executor();
    KVCacheOptions o;
    o.type = KVType::F32;
    o.max_tokens = 1024;
    auto kv = ex.new_kv_cache(o);
    auto ws = ex.new_workspace();
    std::vector<float> logits;
    ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *kv, *ws, LogitsMode::Last, logits);
    ASSERT_EQ(logits.size(), want.size());
    const auto d = egtest::diff(logits.data(), want.data(), want.size());
    EXPECT_LE(d.max_abs, tol) << "max logit " << d.max_ref;
    std::printf("%s: logits_last max|d| %.3g (max %.3g)\n", path.c_str(), d.max_abs, d.max_ref);
    if (tol <= 1e-3) {
      GenerateOptions g;
      g.max_new_tokens = 24;
      g.ignore_eos = true;
      g.sampling.temperature = 0.0f;
      g.kv.type = KVType::F32;
      g.media = p.spans;
      EXPECT_EQ(generate(ex, p.ids, {}, g, nullptr).ids, (*c)["greedy_new_ids"].get<std::vector<int32_t>>());
    }
  }
}
