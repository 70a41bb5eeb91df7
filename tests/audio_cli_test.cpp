// `edgegemma run --audio` and `chat /audio` end to end on tiny-gemma4-mm against transformers'
// ids; media in command-line order with --image; errors (no audio tower, not audio).
#include <gtest/gtest.h>

#include "audio_test_util.h"

namespace {

nlohmann::json ref_case(const std::string& id) {
  const nlohmann::json ref = egtest::read_json(egtest::g4mm_dir() + "/reference.json");
  for (const auto& c : ref["cases"])
    if (c["id"] == id) return c;
  throw std::runtime_error("no case " + id);
}

}  // namespace

TEST(AudioCli, RunAudioMatchesTransformers) {
  const std::string M = egtest::g4mm_dir(), cli = egtest::cli_path();
  const std::string A = egtest::clip_path("aud_tone_noise_4p7s");
  auto r = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--audio", A, "-p", "Describe this.", "-n", "24",
                            "--ignore-eos", "--temp", "0", "--kv-type", "f32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  auto c = ref_case("chat.aud_tone_noise_4p7s");
  EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
  EXPECT_EQ(j["generated_ids"], c["greedy_new_ids"]);
  EXPECT_EQ(j["stats"]["audio_clips"], 1);
  EXPECT_EQ(j["stats"]["soft_tokens_per_clip"], nlohmann::json::array({118}));
  // Plain, with and without the marker.
  for (const std::string& p : {std::string("This sound is"), std::string("<|audio|>This sound is")}) {
    r = egtest::run_cmd({cli, "run", "-m", M, "--audio", egtest::clip_path("aud_chirp_1p3s"), "-p", p, "-n", "24",
                         "--ignore-eos", "--temp", "0", "--kv-type", "f32", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    c = ref_case("plain.aud_chirp_1p3s");
    EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
    EXPECT_EQ(j["generated_ids"], c["greedy_new_ids"]);
  }
  // --image then --audio: the reference's order; --audio then --image: the other order.
  const std::string I = M + "/inputs/img_checker_300x800.png", C = egtest::clip_path("aud_chirp_1p3s");
  r = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--image", I, "--audio", C, "-p", "Describe this.", "-n", "24",
                       "--ignore-eos", "--temp", "0", "--kv-type", "f32", "--json", "--stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  c = ref_case("chat.image_and_audio");
  EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
  EXPECT_EQ(j["generated_ids"], c["greedy_new_ids"]);
  r = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--audio", C, "--image", I, "-p", "Describe this.", "-n", "1",
                       "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out)["prompt_ids"].get<std::vector<int>>();
  ASSERT_GT(ids.size(), 5u);
  EXPECT_EQ(ids[4], 61);  // <|audio> first
}

TEST(AudioCli, Errors) {
  const std::string M = egtest::g4mm_dir(), cli = egtest::cli_path(), C = egtest::clip_path("aud_chirp_1p3s");
  auto r = egtest::run_cmd({cli, "run", "-m", egtest::shared_dir() + "/models/tiny-gemma4", "--audio", C, "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("this model has no audio tower"), std::string::npos) << r.err;
  r = egtest::run_cmd({cli, "run", "-m", M, "--audio", M + "/config.json", "-p", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not a readable audio file"), std::string::npos) << r.err;
  r = egtest::run_cmd({cli, "run", "-m", M, "--audio", C, "-p", "<|audio|>a<|audio|>"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("2 audio marker(s)"), std::string::npos) << r.err;
}

// `chat`: "/audio FILE" attaches the clip to the next message; the answer equals run --chat --audio.
TEST(AudioCli, ChatAudioCommandAnswersAsRun) {
  const std::string M = egtest::g4mm_dir(), cli = egtest::cli_path(), C = egtest::clip_path("aud_chirp_1p3s");
  auto run = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--audio", C, "-p", "Describe this.", "-n", "12",
                              "--ignore-eos", "--kv-type", "f32", "--temp", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto chat = egtest::run_cmd({cli, "chat", "-m", M, "-n", "12", "--ignore-eos", "--kv-type", "f32", "--temp", "0"},
                              "/audio " + C + "\nDescribe this.\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  EXPECT_NE(chat.out.find("(audio clip 1 attached to your next message"), std::string::npos) << chat.out;
  EXPECT_NE(chat.out.find(run.out), std::string::npos) << "run: " << run.out << "\nchat: " << chat.out;
  auto r = egtest::run_cmd({cli, "chat", "-m", egtest::shared_dir() + "/models/tiny-gemma4", "-n", "4"},
                           "/audio " + C + "\n/audio\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("error: this model has no audio tower"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: /audio needs a file name"), std::string::npos) << r.err;
}
