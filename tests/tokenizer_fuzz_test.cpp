// Randomised tokenizer checks on the real Gemma 3 tokenizer: arbitrary bytes never crash and give
// in-vocabulary ids; random valid UTF-8 text (ASCII, CJK, emoji, whitespace runs, special-token
// text) round-trips through encode/decode and streams without ever splitting a character.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

const eg::Tokenizer& gemma3() {
  static const eg::Tokenizer tok = eg::Tokenizer::load_dir(egtest::shared_dir() + "/tokenizers/gemma3");
  return tok;
}

// Structural UTF-8 check: lead byte, then the right number of continuation bytes.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n + 1;
  }
  return true;
}

TEST(TokenizerFuzz, Utf8CheckerSelfTest) {
  EXPECT_TRUE(valid_utf8("abc 中文 😀"));
  EXPECT_FALSE(valid_utf8("\xe4\xb8"));      // truncated 3-byte character
  EXPECT_FALSE(valid_utf8("a\x80"));          // stray continuation byte
  EXPECT_FALSE(valid_utf8("\xf0\x9f\x98"));  // truncated emoji
}

TEST(TokenizerFuzz, ArbitraryBytesNeverCrash) {
  const eg::Tokenizer& tok = gemma3();
  std::mt19937 rng(2026);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xff);
    const std::vector<int32_t> ids = tok.encode(s, iter % 2 == 0, iter % 3 != 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    eg::StreamingDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.push(id);
      ASSERT_TRUE(valid_utf8(piece));
      streamed += piece;
    }
    streamed += detok.flush();
    EXPECT_TRUE(valid_utf8(streamed));
    EXPECT_TRUE(valid_utf8(tok.decode(ids)));
  }
}

TEST(TokenizerFuzz, RandomTextRoundTrips) {
  const eg::Tokenizer& tok = gemma3();
  const std::vector<std::string> pool = {"a", "Z", "7", " ", "  ", "\n", "\n\n", "\t", ".", "the", "ing",
                                         "é", "中", "文", "字", "😀", "👩‍💻", "🇯🇵", "한", "ß", "<start_of_turn>",
                                         "<end_of_turn>", "<bos", "<unused3>", "{", "}", "\\", "\"", "\x01"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    const int n = 1 + rng() % 24;
    for (int i = 0; i < n; ++i) s += pool[rng() % pool.size()];
    const std::vector<int32_t> ids = tok.encode(s, false);
    ASSERT_EQ(tok.decode(ids), s) << "iteration " << iter;
    eg::StreamingDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string piece = detok.push(id);
      ASSERT_TRUE(valid_utf8(piece)) << "iteration " << iter;
      streamed += piece;
    }
    EXPECT_EQ(streamed + detok.flush(), s);
  }
}

}  // namespace
