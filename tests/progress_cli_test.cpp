// Progress of the long commands through the CLI, stderr not a terminal (a pipe): `quantize`
// (also with --awq), `perplexity` (both methods, --json) and `synth` print a few plain progress
// lines ending in a 100% line whose totals are checked against the files written; --quiet prints
// nothing; stdout stays the result only (--json parses).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "format/gguf.h"
#include "test_util.h"

namespace {

std::string tiny() { return egtest::shared_dir() + "/models/tiny-gemma3"; }

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  size_t a = 0;
  for (size_t b; (b = s.find('\n', a)) != std::string::npos; a = b + 1) v.push_back(s.substr(a, b - a));
  if (a < s.size()) v.push_back(s.substr(a));
  return v;
}

// The lines of `err` that start with "<task>: " followed by a percentage.
std::vector<std::string> progress_lines(const std::string& err, const std::string& task) {
  std::vector<std::string> v;
  const std::regex re("^" + task + ": [0-9]+% .*");
  for (const std::string& l : lines(err))
    if (std::regex_match(l, re)) v.push_back(l);
  return v;
}

std::string mb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / 1e6);
  return b;
}

egtest::CmdResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), egtest::cli_path());
  return egtest::run_cmd(args);
}

TEST(ProgressCli, QuantizePrintsProgressLinesQuietNone) {
  const std::string dir = egtest::make_temp_dir();
  const std::string out = dir + "/q.gguf";
  egtest::CmdResult r = cli({"quantize", "-m", tiny(), "-o", out, "--type", "q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Totals from the file written: tensor data bytes (without alignment padding) and tensor count.
  const auto g = eg::GGUFFile::open(out);
  double bytes = 0;
  for (const eg::GGUFTensor& t : g->tensors()) bytes += static_cast<double>(t.nbytes);
  const std::string n = std::to_string(g->tensors().size());
  const std::vector<std::string> p = progress_lines(r.err, "quantize");
  ASSERT_GE(p.size(), 2u) << r.err;
  EXPECT_LE(p.size(), 11u) << r.err;
  const std::regex step("quantize: [0-9]+% [0-9.]+/" + mb(bytes) + " MB, [0-9.]+ [kMG]?B/s, elapsed [0-9]+:[0-9][0-9], ETA ([0-9:]+|\\?), tensor [0-9]+/" + n);
  for (size_t i = 0; i + 1 < p.size(); ++i) EXPECT_TRUE(std::regex_match(p[i], step)) << p[i];
  const std::regex last("quantize: 100% " + mb(bytes) + "/" + mb(bytes) + " MB, [0-9.]+ [kMG]?B/s, elapsed [0-9]+:[0-9][0-9], tensor " + n + "/" + n);
  EXPECT_TRUE(std::regex_match(p.back(), last)) << p.back();
  EXPECT_EQ(lines(r.err).size(), p.size()) << r.err;  // nothing else on stderr for this model
  EXPECT_EQ(r.out.find("quantize:"), std::string::npos) << r.out;  // progress never on stdout
  EXPECT_EQ(r.out.rfind("wrote " + out, 0), 0u) << r.out;

  const egtest::CmdResult q = cli({"quantize", "-m", tiny(), "-o", dir + "/q2.gguf", "--type", "q8_0", "--quiet"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(q.err, "");
  EXPECT_EQ(lines(q.out).size(), 1u) << q.out;
}

TEST(ProgressCli, QuantizeAwqShowsCalibrationAndSearch) {
  const std::string dir = egtest::make_temp_dir();
  const std::string calib = egtest::shared_dir() + "/data/corpus/train.txt";
  const std::string layers =
      std::to_string(nlohmann::json::parse(egtest::read_file(tiny() + "/config.json"))["num_hidden_layers"].get<int>());
  egtest::CmdResult r = cli({"quantize", "-m", tiny(), "-o", dir + "/a.gguf", "--type", "q4_0", "--awq", "--calib", calib,
                             "--calib-tokens", "512"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> c = progress_lines(r.err, "awq: calibration");
  ASSERT_GE(c.size(), 1u) << r.err;
  EXPECT_EQ(c.back().rfind("awq: calibration: 100% 512/512 tokens, ", 0), 0u) << c.back();
  const std::vector<std::string> s = progress_lines(r.err, "awq: search");
  ASSERT_GE(s.size(), 1u) << r.err;
  EXPECT_EQ(s.back().rfind("awq: search: 100% " + layers + "/" + layers + " layers, ", 0), 0u) << s.back();
  EXPECT_FALSE(progress_lines(r.err, "quantize").empty()) << r.err;
  // The order: calibration, then the search, then writing.
  EXPECT_LT(r.err.find("awq: calibration: 100%"), r.err.find("awq: search: 100%"));
  EXPECT_LT(r.err.find("awq: search: 100%"), r.err.find("quantize: 100%"));

  r = cli({"quantize", "-m", tiny(), "-o", dir + "/b.gguf", "--type", "q4_0", "--awq", "--calib", calib, "--calib-tokens",
           "512", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(progress_lines(r.err, "awq: calibration").empty()) << r.err;
  EXPECT_TRUE(progress_lines(r.err, "awq: search").empty()) << r.err;
  EXPECT_TRUE(progress_lines(r.err, "quantize").empty()) << r.err;
}

TEST(ProgressCli, PerplexityJsonStaysCleanProgressOnStderr) {
  const std::string dir = egtest::make_temp_dir();
  const std::string text = dir + "/t.txt";
  const std::string valid = egtest::read_file(egtest::shared_dir() + "/data/corpus/valid.txt");
  egtest::write_file(text, valid.substr(0, valid.rfind('\n', 5000) + 1));
  for (const char* method : {"default", "llama"}) {
    const egtest::CmdResult r = cli({"perplexity", "-m", tiny(), "-f", text, "-c", "64", "--method", method, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(lines(r.out).size(), 1u) << r.out;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const std::string pred = std::to_string(j["predictions"].get<int64_t>());
    const std::string chunks = std::to_string(j["chunks"].get<int>());
    char ppl[32];
    std::snprintf(ppl, sizeof ppl, "%.4f", j["ppl"].get<double>());
    const std::vector<std::string> p = progress_lines(r.err, "perplexity");
    ASSERT_GE(p.size(), 2u) << r.err;
    EXPECT_LE(p.size(), 11u) << r.err;
    const std::string what = std::string(method) == "llama" ? "chunk" : "span";
    const std::regex last("perplexity: 100% " + pred + "/" + pred + " tokens, [0-9.]+ tokens/s, elapsed [0-9]+:[0-9][0-9], " +
                          what + " " + chunks + "/" + chunks + ", ppl " + ppl);
    EXPECT_TRUE(std::regex_match(p.back(), last)) << p.back() << "\n" << r.err;
    EXPECT_NE(p.front().find(", ETA "), std::string::npos) << p.front();

    const egtest::CmdResult q = cli({"perplexity", "-m", tiny(), "-f", text, "-c", "64", "--method", method, "--json", "--quiet"});
    ASSERT_EQ(q.exit_code, 0) << q.err;
    EXPECT_EQ(q.err, "");
    EXPECT_EQ(nlohmann::json::parse(q.out)["ppl"], j["ppl"]);
  }
}

TEST(ProgressCli, SynthPrintsBytesWritten) {
  const std::string dir = egtest::make_temp_dir();
  const std::string tok = egtest::shared_dir() + "/tokenizers/gemma3";
  const egtest::CmdResult r = cli({"synth", "--like", "gemma-3-270m", "--layers", "1", "--tokenizer", tok, "-o", dir + "/s"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Tensor bytes: the file less its 8-byte length and JSON header (safetensors layout).
  const std::string st = dir + "/s/model.safetensors";
  std::FILE* f = std::fopen(st.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  uint64_t header = 0;
  ASSERT_EQ(std::fread(&header, 8, 1, f), 1u);
  std::fclose(f);
  const double bytes = static_cast<double>(std::filesystem::file_size(st) - 8 - header);
  const std::vector<std::string> p = progress_lines(r.err, "synth");
  ASSERT_GE(p.size(), 2u) << r.err;
  EXPECT_LE(p.size(), 11u) << r.err;
  EXPECT_EQ(p.back().rfind("synth: 100% " + mb(bytes) + "/" + mb(bytes) + " MB, ", 0), 0u) << p.back();
  EXPECT_EQ(lines(r.err).size(), p.size()) << r.err;
  EXPECT_EQ(r.out.find("synth:"), std::string::npos) << r.out;

  const egtest::CmdResult q =
      cli({"synth", "--like", "gemma-3-270m", "--layers", "1", "--tokenizer", tok, "-o", dir + "/s2", "--quiet"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(q.err, "");
  EXPECT_EQ(q.out.rfind("wrote " + dir + "/s2: gemma-3-270m-shaped", 0), 0u) << q.out;
}

}  // namespace
