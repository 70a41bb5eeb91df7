// Audio through `edgegemma serve`: OpenAI input_audio parts (base64 wav / mp3) on tiny-gemma4-mm —
// the answer equals the Session's (whose ids equal transformers', audio_session_test), image and
// audio in the order given — and the 400s: bad format, bad base64, not audio, too many clips,
// audio outside user messages, a model without an audio tower.
#include <gtest/gtest.h>

#include "audio/audio.h"
#include "audio_test_util.h"
#include "engine/session.h"
#include "server_test_util.h"
#include "vision/image.h"

using nlohmann::json;
using namespace egtest;

namespace {

std::string b64(const std::string& in) { return egtest::base64(in); }

json audio_part(const std::string& bytes, const std::string& format) {
  return {{"type", "input_audio"}, {"input_audio", {{"data", b64(bytes)}, {"format", format}}}};
}

json request(json content, int max_tokens = 16) {
  return {{"messages", json::array({{{"role", "user"}, {"content", std::move(content)}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true}};
}

eg::server::ServerOptions opts() {
  eg::server::ServerOptions o;
  o.scheduler.slots = 1;
  o.scheduler.context_tokens = 1024;
  o.scheduler.kv.type = eg::KVType::F32;
  o.max_body_bytes = 8 << 20;
  return o;
}

std::pair<std::string, int> session_answer(const std::string& audio_file, const std::string& image, int n) {
  eg::SessionOptions so;
  so.kv.type = eg::KVType::F32;
  so.context_tokens = 1024;
  so.ignore_eos = true;
  eg::Session s(shared_model(g4mm_dir()), so);
  if (!image.empty()) s.add_image(eg::vision::load_image_file(image));
  s.add_audio(eg::audio::load_audio_file(audio_file));
  eg::GenerateParams g;
  g.max_new_tokens = n;
  const eg::TurnResult r = s.chat("Describe this.", g);
  return {r.text, r.stats.prompt_tokens};
}

}  // namespace

TEST(ServerAudio, InputAudioMatchesTheSession) {
  TestServer s(g4mm_dir(), opts());
  const std::string wav = clip_path("aud_chirp_1p3s");
  const auto want = session_answer(wav, "", 16);
  auto [st, body] = s.post("/v1/chat/completions", request(json::array({{{"type", "text"}, {"text", "Describe this."}},
                                                                        audio_part(read_file(wav), "wav")})));
  ASSERT_EQ(st, 200) << body.dump();
  EXPECT_EQ(content_of(body), want.first);
  EXPECT_EQ(body["usage"]["prompt_tokens"], want.second);
  // Image then audio, as given.
  const std::string png = g4mm_dir() + "/inputs/img_checker_300x800.png";
  const auto want2 = session_answer(wav, png, 16);
  const json img = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + b64(read_file(png))}}}};
  std::tie(st, body) = s.post("/v1/chat/completions", request(json::array({img, audio_part(read_file(wav), "wav"),
                                                                           {{"type", "text"}, {"text", "Describe this."}}})));
  ASSERT_EQ(st, 200) << body.dump();
  EXPECT_EQ(content_of(body), want2.first);
  // An MP3 (libsndfile's encoder): accepted, 25 tokens a second.
  std::vector<int16_t> v;
  for (int i = 0; i < 32000; ++i) v.push_back(static_cast<int16_t>(6000 * std::sin(i * 0.05)));
  const std::string mp3 = make_temp_dir() + "/a.mp3";
  ASSERT_TRUE(write_encoded(mp3, SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, v));
  std::tie(st, body) = s.post("/v1/chat/completions", request(json::array({audio_part(read_file(mp3), "mp3")}), 4));
  ASSERT_EQ(st, 200) << body.dump();
  EXPECT_GE(body["usage"]["prompt_tokens"].get<int>(), 50);
}

TEST(ServerAudio, BadAudioIs400) {
  TestServer s(g4mm_dir(), opts());
  const std::string wav = read_file(clip_path("aud_chirp_1p3s"));
  auto expect_400 = [&](const json& content, const std::string& what, const char* role = "user") {
    json r = request(content);
    r["messages"][0]["role"] = role;
    auto [st, body] = s.post("/v1/chat/completions", r);
    EXPECT_EQ(st, 400) << what << ": " << body.dump();
    EXPECT_NE(body.dump().find(what), std::string::npos) << body.dump();
  };
  expect_400(json::array({audio_part(wav, "aiff")}), "unsupported input_audio format");
  expect_400(json::array({{{"type", "input_audio"}, {"input_audio", {{"format", "wav"}}}}}), "needs a 'data' string");
  expect_400(json::array({{{"type", "input_audio"}}}), "needs 'input_audio'");
  expect_400(json::array({{{"type", "input_audio"}, {"input_audio", {{"data", "@@@@"}, {"format", "wav"}}}}}),
             "invalid base64");
  expect_400(json::array({audio_part(std::string(300, 'x'), "wav")}), "not a readable audio file");
  expect_400(json::array({audio_part(wav.substr(0, wav.size() / 2), "wav")}), "truncated");
  expect_400(json::array({audio_part(wav.substr(0, 100), "wav")}), "audio");
  json nine = json::array();
  for (int i = 0; i < 9; ++i) nine.push_back(audio_part(wav, "wav"));
  expect_400(nine, "too many audio clips");
  expect_400(json::array({audio_part(wav, "wav")}), "only accepted in user messages", "system");
  auto [st, body] = s.post("/v1/chat/completions", request(json::array({audio_part(wav, "wav")}), 4));
  EXPECT_EQ(st, 200) << body.dump();
}

TEST(ServerAudio, NoAudioTowerSaysSo) {
  TestServer s(shared_dir() + "/models/tiny-gemma4", opts());
  auto [st, body] = s.post("/v1/chat/completions",
                           request(json::array({audio_part(read_file(clip_path("aud_chirp_1p3s")), "wav")})));
  EXPECT_EQ(st, 400);
  EXPECT_NE(body.dump().find("this model has no audio tower"), std::string::npos) << body.dump();
}
