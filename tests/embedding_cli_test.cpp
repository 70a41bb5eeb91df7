// `edgegemma embed` (src/cli/cmd_embed.cpp) on tests/fixtures/tiny-embeddinggemma: stdin, files,
// --lines, --task, --dim, --json against the sentence-transformers reference; errors exit 1.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

using nlohmann::json;

namespace {

std::string tiny_dir() { return egtest::source_dir() + "/tests/fixtures/tiny-embeddinggemma"; }

const json& reference() {
  static const json j = json::parse(egtest::read_file(tiny_dir() + "/reference.json"));
  return j;
}

const json& ref_case(const std::string& text, const json& prompt) {
  for (const json& c : reference()["cases"])
    if (c["text"] == text && c["prompt_name"] == prompt) return c;
  throw std::runtime_error("no reference case");
}

double max_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i].get<double>()));
  return m;
}

}  // namespace

TEST(EmbedCli, JsonFromStdinWithTask) {
  const std::string text = reference()["cases"][0]["text"];
  const auto r = egtest::run_cmd({egtest::cli_path(), "embed", "-m", tiny_dir(), "--task", "query", "--json"}, text);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["dim"], 64);
  ASSERT_EQ(j["data"].size(), 1u);
  const json& c = ref_case(text, "query");
  EXPECT_EQ(j["data"][0]["tokens"], c["input_ids"].size());
  EXPECT_LT(max_diff(j["data"][0]["embedding"].get<std::vector<float>>(), c["encode"]), 2e-6);
}

TEST(EmbedCli, PlainLinesAndDim) {
  const std::string a = reference()["cases"][0]["text"], b = reference()["cases"][3]["text"];
  const auto r = egtest::run_cmd({egtest::cli_path(), "embed", "-m", tiny_dir(), "--lines", "--dim", "32"}, a + "\n\n" + b + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::vector<std::vector<float>> rows;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<float> v;
    float x;
    while (ls >> x) v.push_back(x);
    rows.push_back(v);
  }
  ASSERT_EQ(rows.size(), 2u);  // the empty line is skipped
  EXPECT_LT(max_diff(rows[0], ref_case(a, nullptr)["truncated"]["32"]), 2e-6);
  EXPECT_LT(max_diff(rows[1], ref_case(b, nullptr)["truncated"]["32"]), 2e-6);
}

TEST(EmbedCli, FilesAreOneTextEach) {
  const std::string dir = egtest::make_temp_dir();
  const std::string a = reference()["cases"][0]["text"];
  egtest::write_file(dir + "/a.txt", a);
  const auto r = egtest::run_cmd({egtest::cli_path(), "embed", "-m", tiny_dir(), "--json", dir + "/a.txt", dir + "/a.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["source"], dir + "/a.txt");
  EXPECT_LT(max_diff(j["data"][1]["embedding"].get<std::vector<float>>(), ref_case(a, nullptr)["encode"]), 2e-6);
}

TEST(EmbedCli, ErrorsExitOne) {
  const std::string chat = egtest::shared_dir() + "/models/tiny-gemma3";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-m", tiny_dir(), "--task", "bogus"},
                                               {"-m", tiny_dir(), "--dim", "7"}, {"-m", chat}}) {
    std::vector<std::string> cmd = {egtest::cli_path(), "embed"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const auto r = egtest::run_cmd(cmd, "x");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos);
  }
}
