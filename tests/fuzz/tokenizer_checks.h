// Checks every tokenizer fuzz target applies to a loaded tokenizer (tokenizer_fuzz, gguf_tokenizer_fuzz).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace egfuzz {

inline void tcheck(bool ok, const std::string& what) {
  if (!ok) fail("tokenizer check", what);
}

inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + n >= s.size()) return false;
    uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}


// encode -> ids in range; decode == streamed text; streamed pieces valid UTF-8.
inline std::vector<int32_t> encode_checked(const eg::Tokenizer& tok, std::string_view text, bool bos, bool special) {
  const std::vector<int32_t> ids = tok.encode(text, bos, special);
  for (int32_t id : ids) tcheck(id >= 0 && id < tok.vocab_size(), "encode returned an id out of range");
  return ids;
}

inline void decode_checked(const eg::Tokenizer& tok, const std::vector<int32_t>& ids) {
  const std::string full = tok.decode(ids);
  eg::StreamingDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    tcheck(valid_utf8(piece), "a streamed piece is not valid UTF-8");
    streamed += piece;
  }
  const std::string rest = d.flush();
  tcheck(valid_utf8(rest), "the flushed piece is not valid UTF-8");
  streamed += rest;
  tcheck(streamed == full, "streamed text differs from decode()");
  (void)tok.decode(ids, /*skip_special=*/true);
}

}  // namespace egfuzz
