// Gemma 4 mmproj files: bad files and mismatched models give clear errors naming the file and
// change nothing; the writer refuses what the format cannot carry; the CLI (quantize --mmproj,
// run --mmproj with --image / --audio) and the C API (eg_model_load_mmproj) on a Gemma 4 text
// GGUF + mmproj behave as the Hugging Face folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>

#include "edgegemma/edgegemma.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "mmproj_gemma4_util.h"

using namespace eg;
using egtest::error_of;
using egtest::g4_files;
using egtest::GKV;
using egtest::GTensor;

namespace {

void expect_error(const std::string& path, const std::string& what) {
  const std::string e = error_of([&] { open_mmproj(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find(what), std::string::npos) << e;
}

bool audio_key(const std::string& k) { return k.rfind("clip.audio.", 0) == 0 || k == "clip.has_audio_encoder"; }
bool audio_tensor(const std::string& n) { return n.rfind("a.", 0) == 0 || n.rfind("mm.a.", 0) == 0; }

// The f32 mmproj without its audio tower, as the converter writes a checkpoint without audio_config.
const std::string& vision_only() {
  static const std::string p = [] {
    const std::string p = g4_files().dir + "/vision-only.gguf";
    egtest::rewrite(g4_files().mm_f32, p, [](GKV& kv, std::vector<GTensor>& ts) {
      egtest::drop_kv(kv, audio_key);
      egtest::drop_tensors(ts, audio_tensor);
    });
    return p;
  }();
  return p;
}

// A copy of the tiny-gemma4-mm folder (the safetensors linked) with config.json edited.
std::string edited_checkpoint(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const std::string d = g4_files().dir + "/" + name;
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(egtest::g4mm_dir()))
    if (e.path().filename() != "config.json" && !fs::exists(d + "/" + e.path().filename().string()))
      fs::create_symlink(e.path(), d + "/" + e.path().filename().string());
  nlohmann::json j = egtest::read_json(egtest::g4mm_dir() + "/config.json");
  edit(j);
  egtest::write_file(d + "/config.json", j.dump(2));
  return d;
}

}  // namespace

TEST(Gemma4MmprojErrors, BadFiles) {
  const auto& f = g4_files();
  const std::string d = f.dir;
  // A missing tensor, an unexpected one, a key that disagrees with the shapes, a missing key.
  egtest::rewrite(f.mm_f16, d + "/missing.gguf", [](GKV&, std::vector<GTensor>& ts) {
    egtest::drop_tensors(ts, [](const std::string& n) { return n == "a.blk.1.conv_dw.weight"; });
  });
  expect_error(d + "/missing.gguf", "missing tensor 'a.blk.1.conv_dw.weight'");
  egtest::rewrite(f.mm_f16, d + "/missing_v.gguf", [](GKV&, std::vector<GTensor>& ts) {
    egtest::drop_tensors(ts, [](const std::string& n) { return n == "v.blk.0.attn_q_norm.weight"; });
  });
  expect_error(d + "/missing_v.gguf", "missing tensor 'v.blk.0.attn_q_norm.weight'");
  egtest::rewrite(f.mm_f16, d + "/extra.gguf", [](GKV&, std::vector<GTensor>& ts) {
    GTensor t = ts.back();
    t.name = "v.blk.0.out_scale.weight";
    ts.push_back(t);
  });
  expect_error(d + "/extra.gguf", "unexpected tensor 'v.blk.0.out_scale.weight'");
  egtest::rewrite(f.mm_f16, d + "/ff.gguf", [](GKV& kv, auto&) { egtest::set_kv(kv, "clip.audio.feed_forward_length", GGUFValue::u32(256)); });
  expect_error(d + "/ff.gguf", "tensor 'a.blk.0.ffn_up.weight': shape [512, 128], expected [256, 128]");
  egtest::rewrite(f.mm_f16, d + "/heads.gguf", [](GKV& kv, auto&) { egtest::set_kv(kv, "clip.vision.attention.head_count", GGUFValue::u32(8)); });
  expect_error(d + "/heads.gguf", "tensor 'v.blk.0.attn_q_norm.weight': shape [32], expected [16]");
  egtest::rewrite(f.mm_f16, d + "/nokey.gguf", [](GKV& kv, auto&) {
    egtest::drop_kv(kv, [](const std::string& k) { return k == "clip.vision.patch_size"; });
  });
  expect_error(d + "/nokey.gguf", "missing metadata key 'clip.vision.patch_size'");
  egtest::rewrite(f.mm_f16, d + "/nomel.gguf", [](GKV& kv, auto&) {
    egtest::drop_kv(kv, [](const std::string& k) { return k == "clip.audio.num_mel_bins"; });
  });
  expect_error(d + "/nomel.gguf", "missing metadata key 'clip.audio.num_mel_bins'");
  // A quantized tensor where llama.cpp keeps F32 (the audio subsampler's projection).
  egtest::rewrite(f.mm_q8, d + "/q8proj.gguf", [](GKV&, std::vector<GTensor>& ts) {
    for (GTensor& t : ts)
      if (t.name == "a.input_projection.weight") {
        t.dtype = DType::Q8_0;
        t.bytes.assign(dtype_row_bytes(DType::Q8_0, 512) * 128, '\0');
      }
  });
  expect_error(d + "/q8proj.gguf", "tensor 'a.input_projection.weight': type Q8_0");
  // per_dim_scale holds softplus(w) > 0.
  egtest::rewrite(f.mm_f32, d + "/pds.gguf", [](GKV&, std::vector<GTensor>& ts) {
    for (GTensor& t : ts)
      if (t.name == "a.blk.1.per_dim_scale.weight") {
        const float neg = -0.5f;
        std::memcpy(t.bytes.data() + 4 * 7, &neg, 4);
      }
  });
  expect_error(d + "/pds.gguf", "'a.blk.1.per_dim_scale.weight' holds softplus(per_dim_scale) and must be positive");
  // Projector types.
  egtest::rewrite(f.mm_f16, d + "/lfm.gguf", [](GKV& kv, auto&) { egtest::set_kv(kv, "clip.audio.projector_type", GGUFValue::str("lfm2a")); });
  expect_error(d + "/lfm.gguf", "audio projector type 'lfm2a' is not Gemma 4's");
  egtest::rewrite(f.mm_f16, d + "/uv.gguf", [](GKV& kv, auto&) { egtest::set_kv(kv, "clip.vision.projector_type", GGUFValue::str("gemma4uv")); });
  expect_error(d + "/uv.gguf", "'gemma4uv' (the unified Gemma 4 towers) is not supported");
  egtest::rewrite(f.mm_f16, d + "/none.gguf", [](GKV& kv, auto&) {
    egtest::set_kv(kv, "clip.has_vision_encoder", GGUFValue::boolean(false));
    egtest::set_kv(kv, "clip.has_audio_encoder", GGUFValue::boolean(false));
  });
  expect_error(d + "/none.gguf", "no vision or audio encoder");
  // Truncated.
  const std::string bytes = egtest::read_file(f.mm_f16);
  egtest::write_file(d + "/trunc.gguf", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(open_mmproj(d + "/trunc.gguf"), Error);
  // A failed attach keeps the working mmproj.
  auto lm = LoadedModel::load(f.text);
  lm->attach_mmproj(f.mm_f16);
  EXPECT_THROW(lm->attach_mmproj(d + "/missing.gguf"), Error);
  EXPECT_EQ(lm->mmproj_path(), f.mm_f16);
  EXPECT_TRUE(lm->image_encoder().gemma4());
  EXPECT_EQ(lm->audio_encoder().marker(), "<|audio|>");
}

TEST(Gemma4MmprojErrors, WrongTextModel) {
  const auto& f = g4_files();
  // Soft tokens 128 wide for a 256-wide text model: the projections cut to 128 outputs.
  const std::string narrow = f.dir + "/narrow.gguf";
  egtest::rewrite(f.mm_f32, narrow, [](GKV& kv, std::vector<GTensor>& ts) {
    egtest::set_kv(kv, "clip.vision.projection_dim", GGUFValue::u32(128));
    egtest::set_kv(kv, "clip.audio.projection_dim", GGUFValue::u32(128));
    for (GTensor& t : ts)
      if (t.name == "mm.input_projection.weight" || t.name == "mm.a.input_projection.weight") {
        t.ne[1] = 128;
        t.bytes.resize(t.bytes.size() / 2);
      }
  });
  // Refused when attached (before any image or audio), and the model keeps no mmproj.
  auto lm = LoadedModel::load(f.text);
  std::string e = error_of([&] { lm->attach_mmproj(narrow); });
  EXPECT_NE(e.find(narrow), std::string::npos) << e;
  EXPECT_NE(e.find("128-wide soft tokens (clip.vision.projection_dim) but the text model is 256 wide"), std::string::npos) << e;
  EXPECT_TRUE(lm->mmproj_path().empty());
  // Audio alone too narrow.
  const std::string narrow_a = f.dir + "/narrow_a.gguf";
  egtest::rewrite(f.mm_f32, narrow_a, [](GKV& kv, std::vector<GTensor>& ts) {
    egtest::set_kv(kv, "clip.audio.projection_dim", GGUFValue::u32(128));
    for (GTensor& t : ts)
      if (t.name == "mm.a.input_projection.weight") {
        t.ne[1] = 128;
        t.bytes.resize(t.bytes.size() / 2);
      }
  });
  e = error_of([&] { lm->attach_mmproj(narrow_a); });
  EXPECT_NE(e.find("128-wide soft tokens (clip.audio.projection_dim) but the text model is 256 wide"), std::string::npos) << e;
  // A Gemma 4 mmproj with a Gemma 3 text model: refused at attach, the working one kept.
  auto g3 = LoadedModel::load(egtest::g3v_dir());
  e = error_of([&] { g3->attach_mmproj(f.mm_f16); });
  EXPECT_NE(e.find("a Gemma 4 mmproj (projector type 'gemma4v') does not belong to this Gemma 3 text model"), std::string::npos) << e;
  EXPECT_NO_THROW(g3->image_encoder());  // the HF folder's own tower still loads
}

TEST(Gemma4MmprojErrors, VisionOnlyFileGivenAudio) {
  const Mmproj m = open_mmproj(vision_only());
  EXPECT_TRUE(m.has_vision);
  EXPECT_FALSE(m.has_audio);
  auto lm = LoadedModel::load(g4_files().text);
  lm->attach_mmproj(vision_only());
  EXPECT_TRUE(lm->image_encoder().gemma4());
  const std::string e = error_of([&] { lm->audio_encoder(); });
  EXPECT_NE(e.find("this model has no audio tower"), std::string::npos) << e;
  EXPECT_NE(e.find(vision_only()), std::string::npos) << e;
  EXPECT_NE(e.find("no audio encoder"), std::string::npos) << e;
  // Without any mmproj: both towers missing, with the hint.
  auto bare = LoadedModel::load(g4_files().text);
  EXPECT_NE(error_of([&] { bare->audio_encoder(); }).find("--mmproj"), std::string::npos);
  EXPECT_NE(error_of([&] { bare->image_encoder(); }).find("--mmproj"), std::string::npos);
}

TEST(Gemma4MmprojErrors, WriterRefusesWhatTheFormatCannotCarry) {
  const std::string out = g4_files().dir + "/refused.gguf";
  std::string e = error_of([&] {
    write_mmproj(edited_checkpoint("theta", [](nlohmann::json& j) { j["vision_config"]["rope_parameters"]["rope_theta"] = 10000.0; }),
                 out, {});
  });
  EXPECT_NE(e.find("rope_theta"), std::string::npos) << e;
  e = error_of([&] {
    write_mmproj(edited_checkpoint("chunk", [](nlohmann::json& j) { j["audio_config"]["attention_chunk_size"] = 8; }), out, {});
  });
  EXPECT_NE(e.find("chunk"), std::string::npos) << e;
  EXPECT_NE(e.find("the mmproj format has no key for it"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(out));
  // Without an audio_config: a vision-only file, as the converter writes.
  const std::string vo = g4_files().dir + "/written-vision-only.gguf";
  const MmprojWriteReport r =
      write_mmproj(edited_checkpoint("noaudio", [](nlohmann::json& j) { j.erase("audio_config"); }), vo, {});
  EXPECT_EQ(r.projector_type, "gemma4v");
  EXPECT_EQ(r.audio_projector_type, "");
  auto g = GGUFFile::open(vo);
  EXPECT_EQ(g->tensors().size(), 85u);
  EXPECT_EQ(g->find("clip.has_audio_encoder"), nullptr);
  EXPECT_FALSE(open_mmproj(vo).has_audio);
}

TEST(Gemma4MmprojErrors, CliQuantizeAndRunLikeTheHfFolder) {
  const std::string d = egtest::make_temp_dir();
  auto q = egtest::run_cmd({egtest::cli_path(), "quantize", "-q", "-m", egtest::g4mm_dir(), "--mmproj", d + "/mm.gguf"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_NE(q.out.find("wrote " + d + "/mm.gguf"), std::string::npos) << q.out;
  const std::string img = egtest::g4mm_dir() + "/inputs/img_gradient_224x224.png";
  const std::string aud = egtest::clip_path("aud_chirp_1p3s");
  auto run = [&](const std::vector<std::string>& model) {
    std::vector<std::string> a = {egtest::cli_path(), "run"};
    a.insert(a.end(), model.begin(), model.end());
    for (const std::string& s : {std::string("-p"), std::string("<|image|> and <|audio|> describe"), std::string("-n"),
                                 std::string("8"), std::string("--image"), img, std::string("--audio"), aud})
      a.push_back(s);
    return egtest::run_cmd(a);
  };
  const auto hf = run({"-m", egtest::g4mm_dir()});
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const auto gg = run({"-m", g4_files().text, "--mmproj", d + "/mm.gguf"});
  ASSERT_EQ(gg.exit_code, 0) << gg.err;
  EXPECT_EQ(gg.out, hf.out);
  const auto vo = run({"-m", g4_files().text, "--mmproj", vision_only()});
  EXPECT_NE(vo.exit_code, 0);
  EXPECT_NE(vo.err.find("no audio tower"), std::string::npos) << vo.err;
}

TEST(Gemma4MmprojErrors, CApiLoadsTextGgufWithMmproj) {
  const std::string img = egtest::g4mm_dir() + "/inputs/img_gradient_224x224.png";
  const std::string aud = egtest::clip_path("aud_chirp_1p3s");
  eg_session_params p;
  eg_session_params_default(&p);
  eg_model* m = nullptr;
  ASSERT_EQ(eg_model_load_mmproj(g4_files().text.c_str(), g4_files().mm_q8.c_str(), "cpu", &m), EG_OK) << eg_last_error();
  eg_session* s = nullptr;
  ASSERT_EQ(eg_session_create(m, &p, &s), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_add_image(s, img.c_str()), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_add_audio(s, aud.c_str()), EG_OK) << eg_last_error();
  eg_session_free(s);
  eg_model_free(m);
  ASSERT_EQ(eg_model_load_mmproj(g4_files().text.c_str(), vision_only().c_str(), "cpu", &m), EG_OK) << eg_last_error();
  ASSERT_EQ(eg_session_create(m, &p, &s), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_add_audio(s, aud.c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("no audio tower"), std::string::npos) << eg_last_error();
  eg_session_free(s);
  eg_model_free(m);
}
