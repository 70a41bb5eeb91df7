// Audio through Session and the C API (eg_session_add_audio from a file, eg_session_add_audio_pcm
// from a float buffer) on tiny-gemma4-mm: the chat cases' prompt ids and 24 greedy ids equal
// transformers'; image + audio in one message in the order attached; no audio tower and bad
// input are clear errors that change nothing.
#include <gtest/gtest.h>

#include <functional>

#include "audio/audio.h"
#include "audio_test_util.h"
#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/session.h"
#include "session_test_util.h"
#include "vision/image.h"

using namespace eg;

namespace {

nlohmann::json ref_case(const std::string& id) {
  const nlohmann::json ref = egtest::read_json(egtest::g4mm_dir() + "/reference.json");
  for (const auto& c : ref["cases"])
    if (c["id"] == id) return c;
  throw std::runtime_error("no case " + id);
}

SessionOptions greedy_opts() {
  SessionOptions o;
  o.kv.type = KVType::F32;
  o.context_tokens = 1024;
  o.ignore_eos = true;
  o.prefill_chunk_tokens = 7;
  return o;
}

GenerateParams n_tokens(int n) {
  GenerateParams g;
  g.max_new_tokens = n;
  return g;
}

// The fixture model, loaded once (the models without an audio tower are loaded per test).
std::shared_ptr<const LoadedModel> mm() {
  static const std::shared_ptr<const LoadedModel> m = LoadedModel::load_dir(egtest::g4mm_dir());
  return m;
}

std::vector<int32_t> prefix(const std::vector<int32_t>& v, size_t n) { return {v.begin(), v.begin() + std::min(n, v.size())}; }

}  // namespace

TEST(AudioSession, ChatWithAudioMatchesTransformers) {
  for (const char* id : {"aud_chirp_1p3s", "aud_tone_noise_4p7s"}) {
    SCOPED_TRACE(id);
    const auto c = ref_case(std::string("chat.") + id);
    const auto want_ids = c["input_ids"].get<std::vector<int32_t>>();
    Session s(mm(), greedy_opts());
    s.add_audio(audio::load_audio_file(egtest::clip_path(id)));
    EXPECT_EQ(s.pending_audio(), 1u);
    EXPECT_EQ(s.pending_images(), 0u);
    s.update_input("Describe th");
    s.wait_idle();
    EXPECT_GT(s.cached_tokens(), 30);
    const TurnResult r = s.chat("Describe this.", n_tokens(24));
    EXPECT_EQ(s.pending_audio(), 0u);
    EXPECT_EQ(r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(prefix(s.context_tokens(), want_ids.size()), want_ids);
    EXPECT_GT(r.stats.reused_tokens, 30);  // the audio block was prefilled while typing
  }
}

TEST(AudioSession, ImageThenAudioInOneMessage) {
  const auto c = ref_case("chat.image_and_audio");
  Session s(mm(), greedy_opts());
  s.add_image(vision::load_image_file(egtest::g4mm_dir() + "/inputs/img_checker_300x800.png"));
  s.add_audio(audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s")));
  const TurnResult r = s.chat("Describe this.", n_tokens(24));
  EXPECT_EQ(r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
  const auto want_ids = c["input_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(prefix(s.context_tokens(), want_ids.size()), want_ids);
  // A second turn with the 44.1 kHz clip (resampled): same answer as a fresh session given the
  // same conversation through add_message.
  const audio::Pcm hi = audio::load_audio_file(egtest::clip_path("aud_tone_44k1_2p0s"));
  s.add_audio(hi);
  const TurnResult r2 = s.chat("And this?", n_tokens(8));
  EXPECT_GT(r2.stats.reused_tokens, static_cast<int>(want_ids.size()));
  Session fresh(mm(), greedy_opts());
  for (const ChatMessage& m : std::vector<ChatMessage>(s.messages().begin(), s.messages().end() - 2))
    fresh.add_message(m.role, m.content, m.images);
  fresh.add_message("user", "And this?", fresh.encode_audio(hi));
  EXPECT_EQ(fresh.generate(n_tokens(8)).ids, r2.ids);
}

TEST(AudioSession, NoAudioTowerAndBadInput) {
  for (const char* name : {"tiny-gemma4", "tiny-gemma3-vision"}) {
    SCOPED_TRACE(name);
    Session s(std::shared_ptr<const LoadedModel>(LoadedModel::load_dir(egtest::shared_dir() + "/models/" + name)),
              greedy_opts());
    try {
      s.add_audio(audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s")));
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("this model has no audio tower"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.pending_audio(), 0u);
    EXPECT_EQ(s.cached_tokens(), 0);
  }
  Session s(mm(), greedy_opts());
  EXPECT_THROW(s.add_audio(audio::Pcm{std::vector<float>(100, 0.1f), 16000}), Error);  // under 10 ms
  EXPECT_EQ(s.pending_audio(), 0u);
  SessionOptions raw = greedy_opts();
  raw.chat = false;
  Session r(mm(), raw);
  EXPECT_THROW(r.add_audio(audio::load_audio_file(egtest::clip_path("aud_chirp_1p3s"))), Error);
}

TEST(AudioCApi, AddAudioFileAndPcmMatchTransformers) {
  const std::string dir = egtest::g4mm_dir();
  const auto c = ref_case("chat.aud_chirp_1p3s");
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
    EXPECT_EQ(r.prompt_tokens, static_cast<int>(c["input_ids"].size()));
    eg_session_free(s);
    return text;
  };
  const std::string file = egtest::clip_path("aud_chirp_1p3s");
  Session ref_s(mm(), greedy_opts());
  ref_s.add_audio(audio::load_audio_file(file));
  const TurnResult ref_r = ref_s.chat("Describe this.", n_tokens(24));
  ASSERT_EQ(ref_r.ids, c["greedy_new_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(answer([&](eg_session* s) { return eg_session_add_audio(s, file.c_str()); }), ref_r.text);
  const audio::Pcm pcm = audio::load_audio_file(file);
  EXPECT_EQ(answer([&](eg_session* s) {
              return eg_session_add_audio_pcm(s, pcm.samples.data(), static_cast<int64_t>(pcm.samples.size()), 16000);
            }),
            ref_r.text);
  eg_session* s = nullptr;
  ASSERT_EQ(eg_session_create(model, &p, &s), EG_OK);
  EXPECT_EQ(eg_session_add_audio(s, nullptr), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_audio(nullptr, file.c_str()), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_audio_pcm(s, nullptr, 10, 16000), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_audio_pcm(s, pcm.samples.data(), 0, 16000), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_audio_pcm(s, pcm.samples.data(), 100, 500), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_add_audio(s, (dir + "/config.json").c_str()), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("not a readable audio file"), std::string::npos) << eg_last_error();
  std::vector<float> nan(1000, std::nanf(""));
  EXPECT_EQ(eg_session_add_audio_pcm(s, nan.data(), 1000, 16000), EG_ERR_FAILED);
  eg_session_free(s);
  eg_model_free(model);
}
