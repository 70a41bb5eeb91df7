// Regression tests for the bugs the libFuzzer targets (tests/fuzz, docs/reliability.md) found:
// each test rebuilds the failing input (or its essence) and checks the fixed behaviour. A bug that
// was undefined behaviour only a sanitizer sees says which sanitizer catches it again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/loaded_model.h"
#include "engine/session.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using V = eg::GGUFValue;

std::shared_ptr<eg::GGUFFile> write_gguf(const std::vector<std::pair<std::string, V>>& kv) {
  const std::string path = egtest::make_temp_dir() + "/t.gguf";
  eg::GGUFWriter w(path, kv, {});
  w.finish();
  return eg::GGUFFile::open(path);
}

// gguf_tokenizer_fuzz: a GGUF token string that is not UTF-8 (GGUF strings are raw bytes) reached
// decode() and the streaming detokenizer, which then emitted invalid UTF-8. Now a load error.
TEST(FuzzRegression, GgufTokenThatIsNotUtf8IsRejected) {
  const auto make = [](std::string piece) {
    return write_gguf({{"tokenizer.ggml.model", V::str("llama")},
                       {"tokenizer.ggml.tokens", V::str_array({"<pad>", "<eos>", "<bos>", "a", std::move(piece)})}});
  };
  EXPECT_NO_THROW(eg::Tokenizer::from_gguf(*make("b\xc3\xa9")));  // valid UTF-8 loads
  for (const char* bad : {"\xff", "b\xc3", "\xed\xa0\x80" /* surrogate */, "\xc0\xaf" /* overlong */}) {
    try {
      eg::Tokenizer::from_gguf(*make(bad));
      ADD_FAILURE() << "a token that is not UTF-8 loaded";
    } catch (const eg::Error& e) {
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens[4] is not valid UTF-8"), std::string::npos) << e.what();
    }
  }
}

// session_fuzz: restoring a session with empty token / logits arrays passed a null pointer to
// memcpy (undefined behaviour). Only clang's UBSan reports it — gcc's (CI's sanitized suite) and a
// plain build do not — so the bug itself is guarded by session_fuzz, whose seeds include this
// empty session (a clang build of this test under UBSan fails with the bug back). Here: an empty
// session must round-trip.
TEST(FuzzRegression, EmptySessionRoundTrips) {
  const auto lm = std::shared_ptr<const eg::LoadedModel>(eg::LoadedModel::load_dir(egtest::shared_dir() + "/models/tiny-gemma3"));
  eg::SessionOptions o;
  o.context_tokens = 64;
  const std::string path = egtest::make_temp_dir() + "/empty.egsession";
  eg::Session(lm, o).save(path);
  eg::Session s(lm, o);
  ASSERT_NO_THROW(s.restore(path));
  EXPECT_TRUE(s.context_tokens().empty());
  EXPECT_EQ(s.cached_tokens(), 0);
}

}  // namespace
