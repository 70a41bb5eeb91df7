// Gemma 3 pan-and-scan (gemma-multimodal.md §1.2.1; transformers image_processing_gemma3.py
// pan_and_scan and processing_gemma3.py replace_image_token, read, not copied).
//
// Expected values are independent of the implementation: the crop boxes are worked out by hand
// from the spec's formula in the comments; the prompt text is transformers' literal sentence
// spelled out here; the crops' pixels are checked against the source image by direct indexing.
// When tests/fixtures/gemma3-panscan/panscan_reference.json exists (tools/gen_panscan_reference.py
// part A, transformers 5.17 on the GPU machine), TransformersReference also compares pixel-value
// checksums, crop counts, the processor's text and its input_ids with it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/generator.h"
#include "engine/image_prompt.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "session_test_util.h"
#include "tokenizer/chat_template.h"
#include "vision/preprocess.h"
#include "vision_test_util.h"

using namespace eg;
using vision::CropBox;

namespace {

std::string fixture() { return egtest::source_dir() + "/tests/fixtures/gemma3-panscan"; }
std::string input(const std::string& name) {
  return name == "wide_1000x260.png" ? fixture() + "/" + name : egtest::g3v_dir() + "/inputs/" + name;
}

std::vector<CropBox> crops(int w, int h, const vision::ImageProcessorConfig& c = {}) {
  return vision::pan_and_scan_crops(h, w, c);
}

bool same(const std::vector<CropBox>& a, const std::vector<CropBox>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].x != b[i].x || a[i].y != b[i].y || a[i].w != b[i].w || a[i].h != b[i].h) return false;
  return true;
}

// transformers' full_image_sequence for N soft tokens, and replace_image_token's sentence.
std::string seq(int n) {
  std::string s = "\n\n<start_of_image>";
  for (int i = 0; i < n; ++i) s += "<image_soft_token>";
  return s + "<end_of_image>\n\n";
}
std::string sentence(int n, int crops) {
  std::string s = "Here is the original image " + seq(n) + " and here are some crops to help you see better ";
  for (int c = 0; c < crops; ++c) s += (c ? " " : "") + seq(n);
  return s;
}

struct G3 {
  std::shared_ptr<const LoadedModel> lm = sessiontest::model("tiny-gemma3-vision");
  const ImageEncoder& enc = lm->image_encoder();
};
G3& g3() {
  static G3 g;
  return g;
}

}  // namespace

TEST(PanAndScan, CropBoxesDefaultSettings) {
  // 300x800 portrait: 800/300 = 2.67 >= 1.2; rows = floor(2.67 + 0.5) = 3, floor(800/256) = 3 -> 3;
  // crop h = ceil(800/3) = 267, w = 300 (>= 256); the last row is clamped to 800 - 534 = 266.
  EXPECT_TRUE(same(crops(300, 800), {{0, 0, 300, 267}, {0, 267, 300, 267}, {0, 534, 300, 266}}));
  // 640x480: 1.33 -> floor(1.83) = 1, raised to 2 columns of 320x480.
  EXPECT_TRUE(same(crops(640, 480), {{0, 0, 320, 480}, {320, 0, 320, 480}}));
  // 1000x260: floor(3.85 + 0.5) = 4, floor(1000/256) = 3 -> 3 columns of ceil(1000/3) = 334, last 332.
  EXPECT_TRUE(same(crops(1000, 260), {{0, 0, 334, 260}, {334, 0, 334, 260}, {668, 0, 332, 260}}));
  // 2000x300: floor(7.17) = 7, floor(2000/256) = 7, capped at max_num_crops 4 -> 500x300 each.
  EXPECT_TRUE(same(crops(2000, 300), {{0, 0, 500, 300}, {500, 0, 500, 300}, {1000, 0, 500, 300}, {1500, 0, 500, 300}}));
  // Exactly the activation ratio 1.2 activates (600/500); just below it does not.
  EXPECT_EQ(crops(600, 500).size(), 2u);
  EXPECT_TRUE(crops(599, 500).empty());
  EXPECT_TRUE(crops(500, 599).empty());
  // Crops below 256 pixels: none (320x240 -> 160-wide; 1000x100 -> 100 high). Square: none.
  EXPECT_TRUE(crops(320, 240).empty());
  EXPECT_TRUE(crops(1000, 100).empty());
  EXPECT_TRUE(crops(224, 224).empty());
  EXPECT_TRUE(crops(4000, 4000).empty());
}

TEST(PanAndScan, SettingsFromTheProcessorConfig) {
  const auto c = vision::load_image_processor_config(fixture() + "/custom", false);
  EXPECT_TRUE(c.do_pan_and_scan);
  EXPECT_EQ(c.pan_and_scan_min_crop_size, 128);
  EXPECT_EQ(c.pan_and_scan_max_num_crops, 3);
  EXPECT_DOUBLE_EQ(c.pan_and_scan_min_ratio_to_activate, 1.1);
  // 320x240: 2 columns of 160 (>= 128). 256x192: 2 of 128. 1000x260: floor(4.35) = 4, capped at 3.
  EXPECT_TRUE(same(crops(320, 240, c), {{0, 0, 160, 240}, {160, 0, 160, 240}}));
  EXPECT_TRUE(same(crops(256, 192, c), {{0, 0, 128, 192}, {128, 0, 128, 192}}));
  EXPECT_EQ(crops(1000, 260, c).size(), 3u);
  // 1.1 activates what 1.2 does not: 550x500 (ratio 1.1) -> 2 columns of 275.
  EXPECT_TRUE(same(crops(550, 500, c), {{0, 0, 275, 500}, {275, 0, 275, 500}}));
  // The released config: off, defaults.
  const auto d = vision::load_image_processor_config(egtest::g3v_dir(), false);
  EXPECT_FALSE(d.do_pan_and_scan);
  EXPECT_EQ(d.pan_and_scan_min_crop_size, 256);
  EXPECT_EQ(d.pan_and_scan_max_num_crops, 4);
  EXPECT_DOUBLE_EQ(d.pan_and_scan_min_ratio_to_activate, 1.2);
}

TEST(PanAndScan, BadSettingsAreErrors) {
  const std::string dir = egtest::make_temp_dir();
  for (const char* bad : {R"("pan_and_scan_min_crop_size": 0)", R"("pan_and_scan_max_num_crops": 0)",
                          R"("pan_and_scan_min_ratio_to_activate": -1)", R"("do_pan_and_scan": "yes")"}) {
    egtest::write_file(dir + "/processor_config.json",
                       std::string(R"({"image_processor": {"do_pan_and_scan": true, )") + bad + "}}");
    EXPECT_THROW(vision::load_image_processor_config(dir, false), Error) << bad;
  }
  // Gemma 4's processor has no pan-and-scan.
  egtest::write_file(dir + "/processor_config.json", R"({"image_processor": {"do_pan_and_scan": true}})");
  EXPECT_THROW(vision::load_image_processor_config(dir, true), Error);
  // A minimum crop of 1 pixel on a 5-pixel-wide image would give an empty 4th crop: refused.
  vision::ImageProcessorConfig c;
  c.pan_and_scan_min_crop_size = 1;
  EXPECT_THROW(crops(5, 1, c), Error);
  std::filesystem::remove_all(dir);
}

TEST(PanAndScan, CropPixelsComeFromTheOriginal) {
  const auto img = vision::load_image_file(input("img_checker_300x800.png"));
  const auto boxes = crops(img.width, img.height);
  ASSERT_EQ(boxes.size(), 3u);
  const auto last = vision::crop_image(img, boxes[2]);
  ASSERT_EQ(last.width, 300);
  ASSERT_EQ(last.height, 266);
  for (int y = 0; y < 266; y += 7)
    for (int x = 0; x < 300; x += 5)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(last.rgb[(y * 300 + x) * 3 + c], img.rgb[((534 + y) * 300 + x) * 3 + c]);
  EXPECT_THROW(vision::crop_image(img, CropBox{0, 534, 300, 267}), Error);  // one row too many
}

TEST(PanAndScan, PromptTextAndIds) {
  const ImageEncoder& enc = g3().enc;
  EXPECT_EQ(enc.expanded_marker(16, 0), seq(16));
  EXPECT_EQ(enc.expanded_marker(16, 3), sentence(16, 3));
  const auto tall = vision::load_image_file(input("img_checker_300x800.png"));
  const auto square = vision::load_image_file(input("img_gradient_224x224.png"));
  // Off by default: the plain expansion.
  EXPECT_TRUE(enc.crops_for(tall, false).empty());
  ImagePrompt off = build_image_prompt(*g3().lm, enc, "<start_of_image>Describe this.", {tall}, false);
  EXPECT_EQ(off.ids, g3().lm->encode_prompt(seq(16) + "Describe this.", false));
  // On: the tall image has 3 crops, the square one none.
  const std::string text = "Compare <start_of_image> with <start_of_image> please.";
  ImagePrompt p = build_image_prompt(*g3().lm, enc, text, {tall, square}, false, true);
  EXPECT_EQ(p.ids, g3().lm->encode_prompt("Compare " + sentence(16, 3) + " with " + seq(16) + " please.", false));
  EXPECT_EQ(p.crops_per_image, (std::vector<int>{3, 0}));
  EXPECT_EQ(p.tokens_per_image, (std::vector<int>{64, 16}));
  ASSERT_EQ(p.spans.size(), 5u);
  const int32_t ph = enc.config().image_token_id;
  for (const EmbedSpan& s : p.spans) {
    EXPECT_EQ(s.n, 16);
    EXPECT_TRUE(s.bidirectional);
    for (int i = 0; i < s.n; ++i) EXPECT_EQ(p.ids[s.begin + i], ph);
  }
  // Block k holds the soft tokens of the original, then of crop k.
  const auto boxes = enc.crops_for(tall, true);
  EXPECT_EQ(p.soft[0], enc.encode(tall));
  EXPECT_EQ(p.soft[2], enc.encode(vision::crop_image(tall, boxes[1])));
  EXPECT_EQ(p.soft[4], enc.encode(square));
}

TEST(PanAndScan, RunsThroughTheModel) {
  // tiny-gemma3-vision with a pan-and-scan prompt: 4 blocks of 16 soft tokens, each bidirectional.
  const auto tall = vision::load_image_file(input("img_checker_300x800.png"));
  ImagePrompt p = build_image_prompt(*g3().lm, g3().enc, "<start_of_image>Describe this.", {tall}, false, true);
  ASSERT_EQ(p.spans.size(), 4u);
  const StepExecutor& ex = g3().lm->executor();
  KVCacheOptions o;
  o.type = KVType::F32;
  o.max_tokens = 512;
  auto kv = ex.new_kv_cache(o);
  auto ws = ex.new_workspace();
  std::vector<float> logits;
  ex.prefill_media(p.ids.data(), static_cast<int>(p.ids.size()), p.spans, *kv, *ws, LogitsMode::Last, logits);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // The crops change the answer's distribution (the same prompt without them differs).
  ImagePrompt q = build_image_prompt(*g3().lm, g3().enc, "<start_of_image>Describe this.", {tall}, false, false);
  auto kv2 = ex.new_kv_cache(o);
  std::vector<float> l2;
  ex.prefill_media(q.ids.data(), static_cast<int>(q.ids.size()), q.spans, *kv2, *ws, LogitsMode::Last, l2);
  double d = 0;
  for (size_t i = 0; i < l2.size(); ++i) d = std::max(d, std::abs(static_cast<double>(l2[i]) - logits[i]));
  EXPECT_GT(d, 1e-3);
}

TEST(PanAndScan, SessionAndCApi) {
  // Session: the chat prompt is the template's, with the marker expanded as transformers does.
  SessionOptions o;
  o.kv.type = KVType::F32;
  o.context_tokens = 1024;
  o.pan_and_scan = true;
  const std::string img = input("img_shapes_640x480.jpg");
  Session s(g3().lm, o);
  s.add_image(vision::load_image_file(img));
  GenerateParams g;
  g.max_new_tokens = 2;
  const TurnResult r = s.chat("What is in this picture?", g);
  EXPECT_EQ(r.stats.images, 1);
  EXPECT_EQ(r.stats.image_soft_tokens, 48);  // the original + 2 crops, 16 each
  ChatOptions co;
  co.add_generation_prompt = true;
  co.bos_token = "<bos>";
  co.eos_token = "<eos>";
  nlohmann::json msgs = nlohmann::json::parse(
      R"([{"role":"user","content":[{"type":"image"},{"type":"text","text":"What is in this picture?"}]}])");
  std::string rendered = ChatTemplate(g3().lm->chat_template()).render(msgs, co);
  const size_t at = rendered.find("<start_of_image>");
  ASSERT_NE(at, std::string::npos);
  rendered.replace(at, std::string("<start_of_image>").size(), sentence(16, 2));
  const std::vector<int32_t> want = g3().lm->encode_prompt(rendered, false);
  ASSERT_GE(s.context_tokens().size(), want.size());
  EXPECT_EQ(std::vector<int32_t>(s.context_tokens().begin(), s.context_tokens().begin() + want.size()), want);

  // C API: eg_session_set_pan_and_scan gives the same prompt (its token count, with the 2 crops).
  eg_model* m = nullptr;
  ASSERT_EQ(eg_model_load(egtest::g3v_dir().c_str(), &m), EG_OK);
  eg_session* cs = nullptr;
  ASSERT_EQ(eg_session_create(m, nullptr, &cs), EG_OK);
  EXPECT_EQ(eg_session_set_pan_and_scan(cs, 2), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_set_pan_and_scan(nullptr, 1), EG_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(eg_session_set_pan_and_scan(cs, 1), EG_OK);
  ASSERT_EQ(eg_session_add_image(cs, img.c_str()), EG_OK);
  eg_generate_params gp{1, nullptr, 0};
  eg_result res;
  ASSERT_EQ(eg_session_chat(cs, "What is in this picture?", &gp, nullptr, nullptr, &res), EG_OK);
  EXPECT_EQ(res.prompt_tokens, static_cast<int32_t>(want.size()));
  // Off again: the next image has no crops (16 soft tokens less 2 × (16 + separators)).
  ASSERT_EQ(eg_session_set_pan_and_scan(cs, 0), EG_OK);
  ASSERT_EQ(eg_session_reset(cs), EG_OK);
  ASSERT_EQ(eg_session_add_image(cs, img.c_str()), EG_OK);
  eg_result res2;
  ASSERT_EQ(eg_session_chat(cs, "What is in this picture?", &gp, nullptr, nullptr, &res2), EG_OK);
  EXPECT_LT(res2.prompt_tokens + 32, res.prompt_tokens);
  eg_session_free(cs);
  eg_model_free(m);
}

TEST(PanAndScan, Gemma4RefusesIt) {
  auto lm = sessiontest::model("tiny-gemma4-mm");
  const auto img = vision::load_image_file(input("img_checker_300x800.png"));
  EXPECT_THROW(lm->image_encoder().crops_for(img, true), Error);
  EXPECT_TRUE(lm->image_encoder().crops_for(img, false).empty());
}

TEST(PanAndScan, CliStatsCountTheCrops) {
  const std::string M = egtest::g3v_dir();
  auto r = egtest::run_cmd({egtest::cli_path(), "run", "-m", M, "--image", input("img_checker_300x800.png"),
                            "--pan-and-scan", "-p", "<start_of_image>Describe this.", "-n", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stats"]["soft_tokens_per_image"], nlohmann::json::array({64}));
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(),
            g3().lm->encode_prompt(sentence(16, 3) + "Describe this.", false));
  auto g4 = egtest::run_cmd({egtest::cli_path(), "run", "-m", egtest::g4mm_dir(), "--image",
                             input("img_checker_300x800.png"), "--pan-and-scan", "-p", "x", "-n", "1"});
  EXPECT_NE(g4.exit_code, 0);
  EXPECT_NE(g4.err.find("Gemma 3"), std::string::npos) << g4.err;
}

// ---- against transformers 5.17 (when the generated reference is present) ----

namespace {

// tools/gen_panscan_reference.py's checksum: Σ uint64(bits(float32 v_i)) · (2i + 1) mod 2^64.
uint64_t checksum(const std::vector<float>& v) {
  uint64_t s = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    s += static_cast<uint64_t>(b) * (2 * static_cast<uint64_t>(i) + 1);
  }
  return s;
}

}  // namespace

TEST(PanAndScan, TransformersReference) {
  const std::string path = fixture() + "/panscan_reference.json";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "no " << path << " (run tools/gen_panscan_reference.py on the GPU machine)";
  const auto ref = egtest::read_json(path);
  ASSERT_GE(ref["cases"].size(), 5u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    const bool custom = c["kind"] == "custom";
    vision::ImageProcessorConfig pc = vision::load_image_processor_config(custom ? fixture() + "/custom" : egtest::g3v_dir(), false);
    const nlohmann::json& kw = c["kwargs"];
    // Gemma3ImageProcessor alone: the config's keys, the call's kwargs over them ("num_crops").
    vision::ImageProcessorConfig alone = pc;
    // Gemma3Processor (what the engine follows): its call defaults win over the config's keys.
    const vision::ImageProcessorConfig def{};
    pc.pan_and_scan_min_crop_size = def.pan_and_scan_min_crop_size;
    pc.pan_and_scan_max_num_crops = def.pan_and_scan_max_num_crops;
    pc.pan_and_scan_min_ratio_to_activate = def.pan_and_scan_min_ratio_to_activate;
    const bool on = kw.contains("do_pan_and_scan") && kw["do_pan_and_scan"].get<bool>();
    if (kw.contains("do_pan_and_scan")) alone.do_pan_and_scan = on;
    for (vision::ImageProcessorConfig* x : {&pc, &alone}) {
      if (kw.contains("pan_and_scan_min_crop_size")) x->pan_and_scan_min_crop_size = kw["pan_and_scan_min_crop_size"];
      if (kw.contains("pan_and_scan_max_num_crops")) x->pan_and_scan_max_num_crops = kw["pan_and_scan_max_num_crops"];
      if (kw.contains("pan_and_scan_min_ratio_to_activate"))
        x->pan_and_scan_min_ratio_to_activate = kw["pan_and_scan_min_ratio_to_activate"];
    }
    std::vector<int> alone_crops;
    std::vector<int> ncrops;
    std::vector<std::vector<float>> pv;
    std::string expected;
    const std::string text = c["text"];
    size_t at = 0;
    for (const auto& name : c["images"]) {
      const auto img = vision::load_image_file(input(name.get<std::string>()));
      const auto boxes = on ? vision::pan_and_scan_crops(img.height, img.width, pc) : std::vector<CropBox>{};
      alone_crops.push_back(alone.do_pan_and_scan ? static_cast<int>(vision::pan_and_scan_crops(img.height, img.width, alone).size()) : 0);
      ncrops.push_back(static_cast<int>(boxes.size()));
      pv.push_back(vision::gemma3_pixel_values(img, pc));
      for (const auto& b : boxes) pv.push_back(vision::gemma3_pixel_values(vision::crop_image(img, b), pc));
      const size_t p = text.find("<start_of_image>", at);
      ASSERT_NE(p, std::string::npos);
      expected += text.substr(at, p - at) + (boxes.empty() ? seq(pc.image_seq_length) : sentence(pc.image_seq_length, boxes.size()));
      at = p + std::string("<start_of_image>").size();
    }
    expected += text.substr(at);
    std::vector<int> want_crops;
    for (const auto& v : c["processor_num_crops"]) want_crops.push_back(v.is_number() ? v.get<int>() : -1);
    EXPECT_EQ(ncrops, want_crops);
    if (!c["num_crops"].is_null()) EXPECT_EQ(alone_crops, c["num_crops"].get<std::vector<int>>());
    ASSERT_EQ(pv.size(), c["pixel_values"].size());
    for (size_t i = 0; i < pv.size(); ++i) {
      const auto& r = c["pixel_values"][i];
      EXPECT_EQ(std::to_string(checksum(pv[i])), r["checksum"].get<std::string>()) << "pixel array " << i;
      const auto idx = r["sample_index"].get<std::vector<size_t>>();
      const auto val = r["sample_value"].get<std::vector<float>>();
      for (size_t s = 0; s < idx.size(); ++s) ASSERT_EQ(pv[i][idx[s]], val[s]) << "pixel array " << i;
    }
    if (!c["processor_text"].is_null()) EXPECT_EQ(expected, c["processor_text"].get<std::string>());
    // Our tokenizer on the processor's text gives transformers' input_ids; so does our prompt path.
    // (The chat case's text writes <bos> itself, tokenised without special tokens: encode_prompt
    // keeps exactly that one, as for the plain cases' added <bos>.)
    const auto want_ids = c["input_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(g3().lm->encode_prompt(expected, false), want_ids);
  }
}
