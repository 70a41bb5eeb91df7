// Validation perplexity of tiny-gemma3 computed as ../shared/models/README.md describes, against
// the transformers float32 numbers recorded in reference.json. Labelled "slow" (75k tokens).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/perplexity.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;

namespace {

std::string tiny(const std::string& name = "tiny-gemma3") { return egtest::shared_dir() + "/models/" + name; }

// Documents are separated by "\n\n\n"; each is encoded as <bos> text <eos>.
std::vector<int32_t> valid_stream(const eg::Tokenizer& tok) {
  const std::string text = egtest::read_file(egtest::shared_dir() + "/data/corpus/valid.txt");
  std::vector<int32_t> stream;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find("\n\n\n", start);
    if (end == std::string::npos) end = text.size();
    const std::string doc = text.substr(start, end - start);
    if (!doc.empty()) {
      std::vector<int32_t> ids = tok.encode(doc, true);
      stream.insert(stream.end(), ids.begin(), ids.end());
      stream.push_back(tok.eos_id());
    }
    start = end + 3;
  }
  return stream;
}

class WholeValidation : public ::testing::TestWithParam<std::string> {};

// Gemma 3 within 0.1% (issue 2), the other families within 0.5% (issue 3); all are far closer.
TEST_P(WholeValidation, MatchesTransformers) {
  const std::string dir = tiny(GetParam());
  const json ref = json::parse(egtest::read_file(dir + "/reference.json"));
  const json& want = ref["valid_ppl_full_float32"];
  auto model = eg::Model::load_dir(dir);
  eg::Tokenizer tok = eg::Tokenizer::load_dir(dir);
  const std::vector<int32_t> stream = valid_stream(tok);
  EXPECT_EQ(stream.size(), 75637u);  // ../shared/models/README.md
  const eg::PerplexityResult r = eg::perplexity(*model, stream, want["window"].get<int>());
  EXPECT_EQ(r.spans, want["windows"].get<int>());
  EXPECT_EQ(r.tokens_predicted, want["tokens_predicted"].get<int64_t>());
  const double ppl = want["ppl"];
  const double tol = GetParam() == "tiny-gemma3" ? 0.001 : 0.005;
  EXPECT_NEAR(r.ppl, ppl, tol * ppl) << "ours " << r.ppl << " transformers " << ppl;
  std::printf("[ info ] %s: perplexity %.4f (transformers %.4f)\n", GetParam().c_str(), r.ppl, ppl);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, WholeValidation,
                         ::testing::Values("tiny-gemma3", "tiny-gemma2", "tiny-gemma4", "tiny-gemma4-moe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n) if (c == '-') c = '_';
                           return n;
                         });

TEST(Perplexity, First4096TokensInOnePass) {
  const json ref = json::parse(egtest::read_file(tiny() + "/reference.json"));
  const json& want = ref["valid_ppl_first_4096_tokens"];
  auto model = eg::Model::load_dir(tiny());
  eg::Tokenizer tok = eg::Tokenizer::load_dir(tiny());
  std::vector<int32_t> ids = tok.encode(egtest::read_file(egtest::shared_dir() + "/data/corpus/valid.txt"), true);
  ASSERT_GE(ids.size(), 4096u);
  ids.resize(4096);
  const eg::PerplexityResult r = eg::perplexity(*model, ids, 4095);
  EXPECT_EQ(r.tokens_predicted, want["n_predicted"].get<int64_t>());
  const double ppl = want["ppl"];
  EXPECT_NEAR(r.ppl, ppl, 0.001 * ppl) << "ours " << r.ppl << " transformers " << ppl;
}

}  // namespace
