// Streamed audio through Session::append_audio / end_audio and the C API (eg_session_append_audio,
// eg_session_end_audio) on tiny-gemma4-mm: a clip streamed in 100 ms chunks while the user types
// gives the blocks add_audio() of the whole clip gives (soft tokens bit for bit) and the same
// answer; completed 30 s segments are encoded and prefilled before the clip ends; the clip ends by
// itself at chat() and before an attached image; a rest under one frame is dropped as add_audio
// drops it; bad chunks are clear errors that keep nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "audio/audio.h"
#include "audio_test_util.h"
#include "core/error.h"
#include "edgegemma/edgegemma.h"
#include "engine/session.h"
#include "session_test_util.h"
#include "vision/image.h"

using namespace eg;

namespace {

SessionOptions greedy_opts() {
  SessionOptions o;
  o.kv.type = KVType::F32;
  o.context_tokens = 2048;
  o.ignore_eos = true;
  return o;
}

GenerateParams n_tokens(int n) {
  GenerateParams g;
  g.max_new_tokens = n;
  return g;
}

std::shared_ptr<const LoadedModel> mm() { return sessiontest::model("tiny-gemma4-mm"); }

// A chirp with LCG noise (speech-like enough for the tower; deterministic).
std::vector<float> clip(double seconds, int rate, uint32_t seed = 5) {
  std::vector<float> v(static_cast<size_t>(seconds * rate));
  uint32_t s = seed;
  for (size_t i = 0; i < v.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    const double t = static_cast<double>(i) / rate;
    v[i] = static_cast<float>(0.4 * std::sin(2 * M_PI * (150 + 40 * std::fmod(t, 7.0)) * t) +
                              0.1 * ((s >> 8) / 16777216.0 - 0.5));
  }
  return v;
}

// Streams `x` in 100 ms chunks, typing one character of `typed` every 5 chunks.
void stream(Session& s, const std::vector<float>& x, int rate, const std::string& typed) {
  const size_t chunk = static_cast<size_t>(rate / 10);
  size_t k = 0, chars = 0;
  for (size_t at = 0; at < x.size(); at += chunk, ++k) {
    s.append_audio(x.data() + at, std::min(chunk, x.size() - at), rate);
    if (k % 5 == 4 && chars < typed.size()) s.update_input(typed.substr(0, ++chars));
  }
}

void expect_same_blocks(const ChatMessage& got, const ChatMessage& want) {
  ASSERT_EQ(got.images.size(), want.images.size());
  for (size_t i = 0; i < got.images.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got.images[i]->audio, want.images[i]->audio);
    EXPECT_EQ(got.images[i]->n, want.images[i]->n);
    const std::vector<float>& a = got.images[i]->soft;
    const std::vector<float>& b = want.images[i]->soft;
    ASSERT_EQ(a.size(), b.size());
    size_t diff = 0, first = a.size();
    for (size_t k = 0; k < a.size(); ++k)
      if (a[k] != b[k]) first = std::min(first, k), ++diff;  // bit for bit
    EXPECT_EQ(diff, 0u) << "first difference at value " << first << " of " << a.size();
  }
}

}  // namespace

TEST(AudioStreamSession, StreamedClipEqualsTheWholeClip) {
  struct Case {
    double seconds;
    int rate;
    int early_blocks;  // completed 30 s segments
  };
  for (const Case c : {Case{65.0, 16000, 2}, Case{34.5, 44100, 1}}) {
    SCOPED_TRACE(c.rate);
    const std::vector<float> x = clip(c.seconds, c.rate);
    Session ref(mm(), greedy_opts());
    ref.add_audio(audio::Pcm{x, c.rate});
    const TurnResult want = ref.chat("Describe this.", n_tokens(8));

    Session s(mm(), greedy_opts());
    stream(s, x, c.rate, "Describe th");
    EXPECT_TRUE(s.streaming_audio());
    EXPECT_EQ(s.pending_audio(), 0u);
    s.wait_idle();
    // The completed segments were encoded and prefilled while the clip was still arriving.
    EXPECT_GT(s.cached_tokens(), 750 * c.early_blocks);
    s.end_audio();
    EXPECT_FALSE(s.streaming_audio());
    EXPECT_EQ(s.pending_audio(), 1u);
    const TurnResult r = s.chat("Describe this.", n_tokens(8));
    EXPECT_EQ(r.ids, want.ids);
    EXPECT_EQ(s.context_tokens(), ref.context_tokens());
    EXPECT_GT(r.stats.reused_tokens, 750 * c.early_blocks);
    EXPECT_EQ(r.stats.audio_clips, 1);
    EXPECT_EQ(r.stats.images, 0);
    EXPECT_EQ(r.stats.audio_soft_tokens, want.stats.audio_soft_tokens);
    EXPECT_GT(r.stats.audio_encode_ms, 0.0);
    // 65 s: 750 + 750 + 125 (5 s: ⌈⌈499 frames / 2⌉ / 2⌉).
    if (c.rate == 16000) EXPECT_EQ(r.stats.audio_soft_tokens, 1625);
    ASSERT_EQ(s.messages().size(), 2u);
    expect_same_blocks(s.messages()[0], ref.messages()[0]);
  }
}

TEST(AudioStreamSession, ClipEndsAtChatAndBeforeAnImage) {
  const std::vector<float> x = clip(2.0, 16000, 9);
  const auto img = vision::load_image_file(egtest::g4mm_dir() + "/inputs/img_checker_300x800.png");
  {  // chat() ends the clip
    Session ref(mm(), greedy_opts());
    ref.add_audio(audio::Pcm{x, 16000});
    const TurnResult want = ref.chat("Describe this.", n_tokens(8));
    Session s(mm(), greedy_opts());
    stream(s, x, 16000, "");
    const TurnResult r = s.chat("Describe this.", n_tokens(8));
    EXPECT_FALSE(s.streaming_audio());
    EXPECT_EQ(r.ids, want.ids);
    EXPECT_EQ(s.context_tokens(), ref.context_tokens());
  }
  {  // add_image() ends the clip first: the clip, then the image
    Session ref(mm(), greedy_opts());
    ref.add_audio(audio::Pcm{x, 16000});
    ref.add_image(img);
    const TurnResult want = ref.chat("Describe this.", n_tokens(8));
    Session s(mm(), greedy_opts());
    stream(s, x, 16000, "");
    s.add_image(img);
    EXPECT_FALSE(s.streaming_audio());
    EXPECT_EQ(s.pending_audio(), 1u);
    EXPECT_EQ(s.pending_images(), 1u);
    const TurnResult r = s.chat("Describe this.", n_tokens(8));
    EXPECT_EQ(r.ids, want.ids);
    EXPECT_EQ(s.context_tokens(), ref.context_tokens());
  }
}

// 30 s + 100 samples: one whole segment, and a rest under one frame that add_audio drops too.
TEST(AudioStreamSession, RestUnderOneFrameIsDroppedAsByAddAudio) {
  const std::vector<float> x = clip(30.0 + 100.0 / 16000, 16000, 13);
  Session ref(mm(), greedy_opts());
  ref.add_audio(audio::Pcm{x, 16000});
  const TurnResult want = ref.chat("Hi", n_tokens(4));
  Session s(mm(), greedy_opts());
  stream(s, x, 16000, "");
  s.end_audio();
  const TurnResult r = s.chat("Hi", n_tokens(4));
  ASSERT_EQ(s.messages()[0].images.size(), 1u);
  expect_same_blocks(s.messages()[0], ref.messages()[0]);
  EXPECT_EQ(r.ids, want.ids);
  EXPECT_EQ(r.stats.audio_soft_tokens, 750);
}

TEST(AudioStreamSession, BadChunksAndClipsAreErrorsThatKeepNothing) {
  const std::vector<float> x = clip(1.0, 16000);
  {
    Session s(sessiontest::model("tiny-gemma4"), greedy_opts());
    try {
      s.append_audio(x.data(), x.size(), 16000);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("this model has no audio tower"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(s.streaming_audio());
  }
  SessionOptions raw = greedy_opts();
  raw.chat = false;
  Session r(mm(), raw);
  EXPECT_THROW(r.append_audio(x.data(), x.size(), 16000), Error);

  Session s(mm(), greedy_opts());
  EXPECT_THROW(s.append_audio(x.data(), x.size(), 500), Error);  // rate out of range
  EXPECT_FALSE(s.streaming_audio());
  s.append_audio(x.data(), 8000, 16000);
  EXPECT_THROW(s.append_audio(x.data(), 100, 44100), Error);  // another rate within one clip
  std::vector<float> nan(100, 0.1f);
  nan[7] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(s.append_audio(nan.data(), nan.size(), 16000), Error);
  const std::vector<float> long_chunk(static_cast<size_t>(600 * 16000), 0.0f);
  EXPECT_THROW(s.append_audio(long_chunk.data(), long_chunk.size(), 16000), Error);  // over 10 minutes
  EXPECT_TRUE(s.streaming_audio());
  s.append_audio(x.data() + 8000, 8000, 16000);
  s.end_audio();
  s.end_audio();  // nothing open: nothing happens
  EXPECT_EQ(s.pending_audio(), 1u);
  Session ref(mm(), greedy_opts());
  ref.add_audio(audio::Pcm{x, 16000});  // the rejected chunks left no trace
  EXPECT_EQ(s.chat("Hi", n_tokens(4)).ids, ref.chat("Hi", n_tokens(4)).ids);
  EXPECT_EQ(s.context_tokens(), ref.context_tokens());

  Session t(mm(), greedy_opts());
  t.append_audio(x.data(), 100, 16000);  // under one 10 ms frame in all
  EXPECT_THROW(t.end_audio(), Error);
  EXPECT_FALSE(t.streaming_audio());
  EXPECT_EQ(t.pending_audio(), 0u);
  t.append_audio(x.data(), 100, 16000);
  t.reset();  // discards the open clip
  EXPECT_FALSE(t.streaming_audio());
  EXPECT_EQ(t.count_prompt_tokens(""), 0);
}

TEST(AudioStreamCApi, AppendAudioEqualsAddAudioPcm) {
  const std::string dir = egtest::g4mm_dir();
  eg_model* model = nullptr;
  ASSERT_EQ(eg_model_load(dir.c_str(), &model), EG_OK) << eg_last_error();
  eg_session_params p;
  eg_session_params_default(&p);
  p.kv_type = EG_KV_F32;
  p.context_tokens = 2048;
  p.ignore_eos = 1;
  eg_generate_params g{8, nullptr, 0};
  auto answer = [&](const std::function<void(eg_session*)>& attach) {
    eg_session* s = nullptr;
    EXPECT_EQ(eg_session_create(model, &p, &s), EG_OK) << eg_last_error();
    attach(s);
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
    EXPECT_EQ(r.generated_tokens, 8);
    eg_session_free(s);
    return text;
  };
  // 31.5 s of stereo at 44.1 kHz (one whole segment before the end), in 100 ms chunks.
  const int rate = 44100;
  const std::vector<float> left = clip(31.5, rate, 3), right = clip(31.5, rate, 4);
  std::vector<float> inter(left.size() * 2);
  std::vector<float> mono(left.size());
  for (size_t i = 0; i < left.size(); ++i) {
    inter[2 * i] = left[i];
    inter[2 * i + 1] = right[i];
    mono[i] = (left[i] + right[i]) / 2.0f;
  }
  const std::string want = answer([&](eg_session* s) {
    EXPECT_EQ(eg_session_add_audio_pcm(s, mono.data(), static_cast<int64_t>(mono.size()), rate), EG_OK)
        << eg_last_error();
  });
  EXPECT_FALSE(want.empty());
  const std::string got = answer([&](eg_session* s) {
    const size_t chunk = rate / 10;
    for (size_t at = 0; at < left.size(); at += chunk)
      ASSERT_EQ(eg_session_append_audio(s, inter.data() + 2 * at, std::min(chunk, left.size() - at), 2, rate), EG_OK)
          << eg_last_error();
    EXPECT_EQ(eg_session_end_audio(s), EG_OK) << eg_last_error();
  });
  EXPECT_EQ(got, want);

  eg_session* s = nullptr;
  ASSERT_EQ(eg_session_create(model, &p, &s), EG_OK);
  EXPECT_EQ(eg_session_append_audio(nullptr, mono.data(), 10, 1, 16000), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_append_audio(s, nullptr, 10, 1, 16000), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_append_audio(s, mono.data(), 10, 0, 16000), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_append_audio(s, mono.data(), 10, 1, 500), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_append_audio(s, nullptr, 0, 1, 16000), EG_OK);
  EXPECT_EQ(eg_session_end_audio(nullptr), EG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(eg_session_end_audio(s), EG_OK);  // nothing open
  ASSERT_EQ(eg_session_append_audio(s, mono.data(), 1000, 1, 16000), EG_OK);
  EXPECT_EQ(eg_session_append_audio(s, mono.data(), 1000, 1, 8000), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("16000 Hz"), std::string::npos) << eg_last_error();
  std::vector<float> nan(20, std::nanf(""));
  EXPECT_EQ(eg_session_append_audio(s, nan.data(), 10, 2, 16000), EG_ERR_FAILED);
  EXPECT_EQ(eg_session_end_audio(s), EG_OK);
  eg_session_free(s);
  // A model without an audio tower.
  eg_model* text = nullptr;
  ASSERT_EQ(eg_model_load((egtest::shared_dir() + "/models/tiny-gemma4").c_str(), &text), EG_OK);
  ASSERT_EQ(eg_session_create(text, &p, &s), EG_OK);
  EXPECT_EQ(eg_session_append_audio(s, mono.data(), 1000, 1, 16000), EG_ERR_FAILED);
  EXPECT_NE(std::string(eg_last_error()).find("no audio tower"), std::string::npos) << eg_last_error();
  eg_session_free(s);
  eg_model_free(text);
  eg_model_free(model);
}
