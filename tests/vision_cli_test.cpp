// `edgegemma run --image` end to end on tiny-gemma3-vision against transformers' ids, and its
// errors (no vision tower, not an image, marker count).
#include <gtest/gtest.h>

#include "vision_test_util.h"

namespace {

nlohmann::json ref_case(const std::string& id) {
  const nlohmann::json ref = egtest::read_json(egtest::g3v_dir() + "/reference.json");
  for (const auto& c : ref["cases"])
    if (c["id"] == id) return c;
  throw std::runtime_error("no case " + id);
}

}  // namespace

TEST(VisionCli, RunImageChatAndPlainMatchTransformers) {
  const std::string M = egtest::g3v_dir();
  const std::string cli = egtest::cli_path();
  // --chat: the images come before the text, in the order given.
  auto r = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--image", M + "/inputs/img_shapes_640x480.jpg", "--image",
                            M + "/inputs/img_gradient_224x224.png", "-p", "What is different between these?", "-n", "24",
                            "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  auto c = ref_case("chat.two_images");
  EXPECT_EQ(j["prompt_ids"], c["input_ids"]);
  EXPECT_EQ(j["generated_ids"], c["greedy_new_ids"]);
  EXPECT_EQ(j["stats"]["images"], 2);
  EXPECT_EQ(j["stats"]["soft_tokens_per_image"], nlohmann::json::array({16, 16}));
  // Without --chat and without a marker: the image goes before the text; with the marker: there.
  for (const std::string& p : {std::string("This picture shows"), std::string("<start_of_image>This picture shows")}) {
    r = egtest::run_cmd({cli, "run", "-m", M, "--image", M + "/inputs/img_rgba_256x192.png", "-p", p, "-n", "24",
                         "--ignore-eos", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    j = nlohmann::json::parse(r.out);
    c = ref_case("plain.img_rgba_256x192");
    EXPECT_EQ(j["prompt_ids"], c["input_ids"]) << p;
    EXPECT_EQ(j["generated_ids"], c["greedy_new_ids"]) << p;
  }
}

TEST(VisionCli, Errors) {
  const std::string M = egtest::g3v_dir();
  const std::string cli = egtest::cli_path();
  const std::string img = M + "/inputs/img_gray_320x240.png";
  auto r = egtest::run_cmd({cli, "run", "-m", egtest::shared_dir() + "/models/tiny-gemma3", "--image", img, "-p", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("this model has no vision tower"), std::string::npos) << r.err;
  r = egtest::run_cmd({cli, "run", "-m", M, "--image", M + "/config.json", "-p", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not an image"), std::string::npos) << r.err;
  r = egtest::run_cmd({cli, "run", "-m", M, "--image", img, "-p", "<start_of_image>a<start_of_image>"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("2 image marker(s)"), std::string::npos) << r.err;
  r = egtest::run_cmd({cli, "run", "-m", M, "--image", M + "/missing.png", "-p", "hi"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.png"), std::string::npos) << r.err;
}

// `chat`: "/image FILE" attaches the image to the next message; the answer equals `run --chat
// --image` (verified against transformers above / in vision_model_test), on both families.
TEST(VisionCli, ChatImageCommandAnswersAsRun) {
  const std::string cli = egtest::cli_path();
  for (const std::string& M : {egtest::g3v_dir(), egtest::g4mm_dir()}) {
    SCOPED_TRACE(M);
    const std::string img = M + "/inputs/img_checker_300x800.png";
    auto run = egtest::run_cmd({cli, "run", "-m", M, "--chat", "--image", img, "-p", "Describe this.", "-n", "12",
                                "--ignore-eos", "--kv-type", "f32", "--temp", "0"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    auto chat = egtest::run_cmd({cli, "chat", "-m", M, "-n", "12", "--ignore-eos", "--kv-type", "f32", "--temp", "0"},
                                "/image " + img + "\nDescribe this.\n/stats\n");
    ASSERT_EQ(chat.exit_code, 0) << chat.err;
    EXPECT_NE(chat.out.find("(image 1 attached to your next message"), std::string::npos) << chat.out;
    // /stats names the turn's image: its soft tokens (Gemma 3: mm_tokens_per_image = 16) and encode time.
    const bool g3 = M == egtest::g3v_dir();
    EXPECT_NE(chat.out.find(g3 ? "| images: 1 (16 soft tokens, " : "| images: 1 ("), std::string::npos) << chat.out;
    EXPECT_NE(chat.out.find(run.out), std::string::npos) << "run: " << run.out << "\nchat: " << chat.out;
  }
  // A text-only model: a clear error, and the conversation goes on without the image.
  auto r = egtest::run_cmd({cli, "chat", "-m", egtest::shared_dir() + "/models/tiny-gemma3", "-n", "4"},
                           "/image " + egtest::g3v_dir() + "/inputs/img_gray_320x240.png\n/image\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find("error: this model has no vision tower"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("error: /image needs a file name"), std::string::npos) << r.err;
}

// Gemma 4 `run --image`: the plain and chat cases of tiny-gemma4-mm end to end.
TEST(VisionCli, RunImageGemma4MatchesTransformers) {
  const std::string M = egtest::g4mm_dir();
  const nlohmann::json ref = egtest::read_json(M + "/reference.json");
  auto find = [&](const std::string& id) {
    for (const auto& c : ref["cases"])
      if (c["id"] == id) return c;
    throw std::runtime_error(id);
  };
  auto r = egtest::run_cmd({egtest::cli_path(), "run", "-m", M, "--chat", "--image", M + "/inputs/img_shapes_640x480.jpg",
                            "--image", M + "/inputs/img_gradient_224x224.png", "-p", "What is different between these?",
                            "-n", "24", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], find("chat.two_images")["input_ids"]);
  EXPECT_EQ(j["generated_ids"], find("chat.two_images")["greedy_new_ids"]);
  EXPECT_EQ(j["stats"]["soft_tokens_per_image"], nlohmann::json::array({266, 256}));
  r = egtest::run_cmd({egtest::cli_path(), "run", "-m", M, "--image", M + "/inputs/img_gray_320x240.png", "-p",
                       "<|image|>This picture shows", "-n", "24", "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], find("plain.img_gray_320x240")["input_ids"]);
  EXPECT_EQ(j["generated_ids"], find("plain.img_gray_320x240")["greedy_new_ids"]);
}
