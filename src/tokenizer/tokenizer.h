// Gemma tokenizer from a Hugging Face tokenizer.json (+ tokenizer_config.json).
//
// Reproduces HF `tokenizers` for the Gemma family's tokenizer.json:
//   normalizer Replace(" " -> "▁"), no-op Split pre-tokenizer, BPE (merges by rank) with
//   byte_fallback (<0xNN> pieces) and fuse_unk, added tokens (special and non-special, e.g. the
//   whitespace runs with normalized:false) matched before BPE, post-processor adding <bos>,
//   decoder Replace("▁" -> " ") + ByteFallback + Fuse.
// Token ids are int32. Text is UTF-8.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace eg {

class Tokenizer {
 public:
  /// Loads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json (add_bos_token,
  /// chat_template, bos/eos token names). Throws eg::Error on a missing or malformed file.
  static Tokenizer load_dir(const std::string& dir);
  static Tokenizer load_files(const std::string& tokenizer_json, const std::string& config_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Encodes `text`. add_bos: prepend <bos> (as HF encode(add_special_tokens=True)).
  /// parse_special: text like "<start_of_turn>" becomes the special token (HF default); when
  /// false, special tokens are encoded as plain text (HF encode_special_tokens=True), while
  /// non-special added tokens (whitespace runs, <unused0>) are still matched.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = true) const;

  /// Decodes ids to UTF-8 (HF decode). skip_special drops special tokens. Invalid UTF-8 from
  /// byte-fallback pieces becomes U+FFFD, as HF does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  /// The vocabulary string of one id ("▁the", "<0x0A>", "<bos>"); throws on an out-of-range id.
  const std::string& piece(int32_t id) const;
  /// Id of an exact vocabulary string, or -1.
  int32_t token_id(std::string_view piece) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none
  bool is_special(int32_t id) const;
  /// add_bos_token from tokenizer_config.json (true when the file is absent: the post-processor adds <bos>).
  bool add_bos() const;
  /// chat_template from tokenizer_config.json ("" when absent).
  const std::string& chat_template() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamingDetokenizer;
};

/// Turns a stream of ids into UTF-8 text pieces without ever emitting a partial UTF-8 character:
/// bytes of an incomplete character (byte-fallback pieces of a CJK char or emoji) are held back
/// until the character completes. push() returns the newly completed text (possibly "").
/// Concatenating all push() results plus flush() equals decode(all ids).
/// (One exception, for ids no text encodes to: decode() turns a whole run of consecutive byte
/// pieces into one U+FFFD per byte as soon as any part of the run is invalid UTF-8, while push()
/// has already emitted the run's valid characters; it emits U+FFFD per invalid byte only.)
/// After flush() the detokenizer can be reused for a new stream.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);
  /// Emits what is held back (an incomplete tail becomes U+FFFD as in decode()).
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // raw bytes not yet emitted
  // Only for decoders other than Gemma's Replace+ByteFallback+Fuse: ids so far, text emitted.
  std::vector<int32_t> ids_;
  std::string emitted_text_;
};

}  // namespace eg
