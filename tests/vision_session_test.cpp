// Images through Session and the C API (eg_session_add_image / eg_session_add_image_rgb) on both
// multimodal fixtures, against transformers' input_ids and 24 greedy ids, plus the KV reuse of
// image blocks (prefill while typing, a second turn), and the errors (no vision tower, bad
// buffers, saving). References come from the fixtures (reference.json), never from the Session.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/session.h"
#include "session_test_util.h"
#include "vision/image.h"
#include "vision_test_util.h"

using namespace eg;

namespace {

nlohmann::json ref_case(const std::string& dir, const std::string& id) {
  const nlohmann::json ref = egtest::read_json(dir + "/reference.json");
  for (const auto& c : ref["cases"])
    if (c["id"] == id) return c;
  throw std::runtime_error("no case " + id);
}

SessionOptions greedy_opts(int prefill_chunk = 32) {
  SessionOptions o;
  o.kv.type = KVType::F32;
  o.context_tokens = 1024;
  o.ignore_eos = true;  // the references do not stop at <eos> / end of turn
  o.prefill_chunk_tokens = prefill_chunk;
  return o;
}

GenerateParams n_tokens(int n) {
  GenerateParams g;
  g.max_new_tokens = n;
  return g;
}

std::vector<int32_t> prefix(const std::vector<int32_t>& v, size_t n) { return {v.begin(), v.begin() + std::min(n, v.size())}; }

struct Fx {
  std::string name, dir, image, case_id;
};
// One image chat case per fixture (images first, then "Describe this.").
const Fx kFixtures[] = {{"tiny-gemma3-vision", "", "img_shapes_640x480.jpg", "chat.img_shapes_640x480"},
                        {"tiny-gemma4-mm", "", "img_checker_300x800.png", "chat.img_checker_300x800"}};

}  // namespace

TEST(VisionSession, ChatWithAnImageMatchesTransformers) {
  for (Fx f : kFixtures) {
    SCOPED_TRACE(f.name);
    f.dir = egtest::shared_dir() + "/models/" + f.name;
    const auto c = ref_case(f.dir, f.case_id);
    const auto want_ids = c["input_ids"].get<std::vector<int32_t>>();
    const auto want_gen = c["greedy_new_ids"].get<std::vector<int32_t>>();
    // Small background chunks: a Gemma 3 image block (16 rows) must still be prefilled whole.
    Session s(sessiontest::model(f.name), greedy_opts(5));
    s.add_image(vision::load_image_file(f.dir + "/inputs/" + f.image));
    EXPECT_EQ(s.pending_images(), 1u);
    s.update_input("Describe th");  // typing: the image block prefills in the background
    s.wait_idle();
    EXPECT_GT(s.cached_tokens(), 16);
    const TurnResult r = s.chat("Describe this.", n_tokens(24));
    EXPECT_EQ(s.pending_images(), 0u);
    EXPECT_EQ(r.ids, want_gen);
    EXPECT_EQ(prefix(s.context_tokens(), want_ids.size()), want_ids);
    EXPECT_GT(r.stats.reused_tokens, 16);  // the image block was not prefilled again
    ASSERT_EQ(s.messages().size(), 2u);
    EXPECT_EQ(s.messages()[0].images.size(), 1u);

    // A second turn with another image: same ids as a fresh session given the same conversation.
    const auto img2 = vision::load_image_file(f.dir + "/inputs/img_gradient_224x224.png");
    s.add_image(img2);
    const TurnResult r2 = s.chat("And this one?", n_tokens(8));
    EXPECT_GT(r2.stats.reused_tokens, static_cast<int>(want_ids.size()));
    Session fresh(sessiontest::model(f.name), greedy_opts());
    for (const ChatMessage& m : std::vector<ChatMessage>(s.messages().begin(), s.messages().end() - 2))
      fresh.add_message(m.role, m.content, m.images);
    fresh.add_image(img2);
    EXPECT_EQ(fresh.chat("And this one?", n_tokens(8)).ids, r2.ids);
    // Saving a conversation with images is refused (the images are not stored) and harmless.
    EXPECT_THROW(s.save(egtest::make_temp_dir() + "/img.session"), Error);
  }
}

// The "0 token" image: attached when typing starts, encoded and prefilled while the question is
// typed, the prompt's logits and the answer are those of the image attached at Enter (and of a
// session given the whole message at once), bit for bit with F32 KV.
TEST(VisionSession, ImageAttachedWhileTypingEqualsAttachedAtEnter) {
  for (Fx f : kFixtures) {
    SCOPED_TRACE(f.name);
    f.dir = egtest::shared_dir() + "/models/" + f.name;
    const auto img = vision::load_image_file(f.dir + "/inputs/" + f.image);
    const std::string q = "What is in the picture, and which colours does it have?";
    auto type = [&](Session& s) {
      for (size_t i = 1; i <= q.size(); ++i) s.update_input(q.substr(0, i));
    };
    Session early(sessiontest::model(f.name), greedy_opts(5));
    early.add_image(img);
    type(early);
    early.wait_idle();
    const int cached_before_enter = early.cached_tokens();
    const std::vector<float> early_logits = early.prefill();

    Session late(sessiontest::model(f.name), greedy_opts(5));
    type(late);
    late.wait_idle();
    late.add_image(img);
    const std::vector<float> late_logits = late.prefill();

    Session whole(sessiontest::model(f.name), greedy_opts());
    whole.add_message("user", q, {whole.encode_image(img)});
    const std::vector<float> whole_logits = whole.prefill();

    EXPECT_GT(cached_before_enter, early.count_prompt_tokens(q) - 12);  // only the tail was left
    EXPECT_EQ(early_logits, late_logits);
    EXPECT_EQ(early_logits, whole_logits);
    const TurnResult a = early.chat(q, n_tokens(8)), b = late.chat(q, n_tokens(8));
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(early.context_tokens(), late.context_tokens());
    // The turn's stats name its image: soft tokens = the placeholder run in the prompt.
    const Tokenizer& tok = sessiontest::model(f.name)->tokenizer();
    const int32_t ph = tok.token_id(f.name == "tiny-gemma3-vision" ? "<image_soft_token>" : "<|image|>");
    const auto& ctx = early.context_tokens();
    EXPECT_EQ(a.stats.images, 1);
    EXPECT_EQ(a.stats.image_soft_tokens, static_cast<int>(std::count(ctx.begin(), ctx.end(), ph)));
    EXPECT_GT(a.stats.image_encode_ms, 0.0);
    EXPECT_EQ(a.stats.audio_clips, 0);
  }
}

TEST(VisionSession, ReplacingTheImageIsNotReusingItsCache) {
  // Same placeholder ids, different image: when the overflow policy drops the first turn, the
  // second turn's prompt has exactly the first prompt's ids (both images give 266 soft tokens),
  // so only the per-position image identity keeps the first image's KV from being reused.
  const std::string name = "tiny-gemma4-mm", dir = egtest::shared_dir() + "/models/" + name;
  SessionOptions o = greedy_opts();
  o.context_tokens = 600;  // 284 + 24, then 284 + 24 more does not fit: turn 1 is dropped
  Session s(sessiontest::model(name), o);
  s.add_image(vision::load_image_file(dir + "/inputs/img_shapes_640x480.jpg"));
  const TurnResult r1 = s.chat("Describe this.", n_tokens(24));
  EXPECT_EQ(r1.ids, ref_case(dir, "chat.img_shapes_640x480")["greedy_new_ids"].get<std::vector<int32_t>>());
  s.add_image(vision::load_image_file(dir + "/inputs/img_rgba_256x192.png"));
  const TurnResult r2 = s.chat("Describe this.", n_tokens(24));
  EXPECT_EQ(r2.stats.dropped_messages, 2);
  EXPECT_LT(r2.stats.reused_tokens, 10);  // only the text before the image
  EXPECT_EQ(r2.ids, ref_case(dir, "chat.img_rgba_256x192")["greedy_new_ids"].get<std::vector<int32_t>>());
}

TEST(VisionSession, TextOnlyModelRefusesImages) {
  Session s(sessiontest::model("tiny-gemma3"), greedy_opts());
  const auto img = vision::load_image_file(egtest::g3v_dir() + "/inputs/img_gray_320x240.png");
  try {
    s.add_image(img);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model has no vision tower"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.pending_images(), 0u);
  EXPECT_EQ(s.cached_tokens(), 0);
}

TEST(VisionCApi, AddImageFileAndBuffersMatchTransformers) {
  const std::string dir = egtest::g4mm_dir();
  const auto c = ref_case(dir, "chat.img_rgba_256x192");
  eg_model* model = nullptr;
  ASSERT_EQ(eg_model_load(dir.c_str(), &model), EG_OK) << eg_last_error();
  eg_session_params p;
  eg_session_params_default(&p);
  p.kv_type = EG_KV_F32;
  p.context_tokens = 1024;
  p.ignore_eos = 1;
  eg_generate_params g{24, nullptr, 0};
  auto answer = [&](const std::function<int(eg_session*)>& attach) {
    eg_session* s = nullptr;
    EXPECT_EQ(eg_session_create(model, &p, &s), EG_OK) << eg_last_error();
    EXPECT_EQ(attach(s), EG_OK) << eg_last_error();
    std::string text;
    eg_result r{};
    EXPECT_EQ(eg_session_chat(
                  s, "Describe this.", &g,
                  [](const char* piece, void* u) {
                    *static_cast<std::string*>(u) += piece;
                    return 0;
                  },
                  &text, &r),
              EG_OK)
        << eg_last_error();
    EXPECT_EQ(r.generated_tokens, 24);
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(c["input_ids"].size()));
    eg_session_free(s);
    return text;
  };
  const std::string file = dir + "/inputs/img_rgba_256x192.png";
  // The text of the Session run whose ids equal transformers' greedy ids.
  Session ref_s(sessiontest::model("tiny-gemma4-mm"), greedy_opts());
  ref_s.add_image(vision::load_image_file(file));
  const TurnResult ref_r = ref_s.chat("Describe this.", n_tokens(24));
  ASSERT_EQ(ref_r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
  const std::string want = ref_r.text;
  EXPECT_EQ(answer([&](eg_session* s) { return eg_session_add_image(s, file.c_str()); }), want);
  // The same image as an RGBA buffer with padded rows (stride > width·4): the same answer.
  const vision::RgbImage rgb = vision::load_image_file(file);  // alpha dropped: RGB is what counts
  const int W = rgb.width, Hh = rgb.height, stride = W * 4 + 12;
  std::vector<uint8_t> rgba(static_cast<size_t>(stride) * Hh, 0xEE);
  for (int y = 0; y < Hh; ++y)
    for (int x = 0; x < W; ++x) {
      std::memcpy(&rgba[y * stride + x * 4], &rgb.rgb[(y * W + x) * 3], 3);
      rgba[y * stride + x * 4 + 3] = static_cast<uint8_t>(x);  // any alpha: dropped
    }
  EXPECT_EQ(answer([&](eg_session* s) { return eg_session_add_image_rgb(s, rgba.data(), W, Hh, 4, stride); }), want);
  EXPECT_EQ(answer([&](eg_session* s) { return eg_session_add_image_rgb(s, rgb.rgb.data(), W, Hh, 3, 0); }), want);

  // Bad arguments: codes and messages, nothing attached.
  eg_session* s = nullptr;
  ASSERT_EQ(eg_session_create(model, &p, &s), EG_OK);
  EXPECT_EQ(eg_session_add_image(s, nullptr), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_image(nullptr, file.c_str()), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_image_rgb(s, nullptr, W, Hh, 3, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_image_rgb(s, rgb.rgb.data(), W, Hh, 2, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eg_last_error()).find("channels"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_session_add_image_rgb(s, rgb.rgb.data(), W, Hh, 3, W * 3 - 1), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_image_rgb(s, rgb.rgb.data(), 0, Hh, 3, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_image_rgb(s, rgb.rgb.data(), 70000, 2, 3, 0), EG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(eg_last_error()).find("too large"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_session_add_image(s, (dir + "/config.json").c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("not an image"), std::string::npos) << eg_last_error();
  // With an image attached, saving fails with a message.
  ASSERT_EQ(eg_session_add_image(s, file.c_str()), EG_OK) << eg_last_error();
  ASSERT_EQ(eg_session_chat(s, "Hi", &g, nullptr, nullptr, nullptr), EG_OK) << eg_last_error();
  EXPECT_EQ(eg_session_save(s, (egtest::make_temp_dir() + "/capi_img.session").c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("images"), std::string::npos) << eg_last_error();
  eg_session_free(s);
  eg_model_free(model);

  // A text-only model: a clear failure, not a silent text-only answer.
  ASSERT_EQ(eg_model_load((egtest::shared_dir() + "/models/tiny-gemma3").c_str(), &model), EG_OK);
  ASSERT_EQ(eg_session_create(model, &p, &s), EG_OK);
  EXPECT_EQ(eg_session_add_image(s, file.c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("this model has no vision tower"), std::string::npos) << eg_last_error();
  EXPECT_EQ(eg_session_add_image_rgb(s, rgb.rgb.data(), W, Hh, 3, 0), EG_ERR_FAILED);
  eg_session_free(s);
  eg_model_free(model);
}
