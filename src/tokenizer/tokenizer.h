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

class GGUFFile;
struct GGUFValue;

class Tokenizer {
 public:
  /// Loads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json (add_bos_token,
  /// chat_template, bos/eos token names). Throws eg::Error on a missing or malformed file.
  static Tokenizer load_dir(const std::string& dir);
  static Tokenizer load_files(const std::string& tokenizer_json, const std::string& config_json);

  /// From GGUF metadata (tokenizer_gguf.cpp): tokenizer.ggml.model "llama" (SentencePiece vocab
  /// with scores) or "gemma4" (BPE with tokenizer.ggml.merges), tokens, token_type (NORMAL,
  /// CONTROL, USER_DEFINED, BYTE, ...), bos/eos/unk ids, add_bos_token, chat_template. Rebuilt as
  /// the equivalent Hugging Face pipeline (Replace " "->"▁", BPE with byte fallback, CONTROL and
  /// USER_DEFINED tokens as added tokens matched in the raw text), so ids equal the
  /// tokenizer.json path. "llama" files: when tokenizer.ggml.merges is present (edgegemma writes
  /// it) it gives the merge ranks exactly; otherwise every split of a piece into two vocabulary
  /// pieces becomes a merge ranked by the merged piece's score (SentencePiece's rule), with
  /// USER_DEFINED pieces first (SentencePiece never splits them). USER_DEFINED pieces have their
  /// spaces turned back into "▁" (llama.cpp's converter pre-normalizes them). CONTROL tokens are
  /// special when they are the bos/eos/unk/pad ids, <pad>/<eos>/<bos>/<unk>, or their name has
  /// '_' or '|' (Gemma's turn,
  /// image and tool tokens); other CONTROL tags (<mask>, <unusedN>, <table>) are non-special
  /// added tokens, as in Gemma's tokenizer.json. "gemma4" files from llama.cpp mark non-special
  /// added tokens NORMAL: runs of "\n" / "\t", <unusedN>, <mask>, [multimodal] become added
  /// tokens again. SentencePiece files without merges get merges ranked by score, after the
  /// USER_DEFINED pieces' merges, longer left part first (HF's order for Gemma's whitespace runs;
  /// a tokenizer.json that ranks them otherwise can split a run of spaces before a word
  /// differently). Padding tokens "[PADn]" (UNUSED) are never produced by encode.
  /// Throws eg::Error naming the file and key on missing or inconsistent fields.
  static Tokenizer from_gguf(const GGUFFile& g);

  /// The tokenizer.* metadata llama.cpp's converter writes (see from_gguf), appended to `kv`:
  /// spm=true: model "llama" with scores (BYTE 0, merged piece −(rank of its first merge),
  /// single characters below every merged piece, added tokens −1000), types (special and
  /// <...>-looking added tokens CONTROL, other added tokens USER_DEFINED with "▁" written as
  /// spaces, <0xNN> BYTE) and, for an exact round trip, tokenizer.ggml.merges (llama.cpp ignores
  /// it for this model); spm=false: model "gemma4" with merges, scores −1000, special tokens
  /// CONTROL, other added tokens USER_DEFINED.
  void to_gguf_metadata(std::vector<std::pair<std::string, GGUFValue>>& kv, bool spm) const;
  /// Makes the tokenizer.ggml.* vocabulary in `kv` exactly `rows` tokens long, the row count of
  /// token_embd, as llama.cpp's converter writes it and its loader requires: ids >= rows are
  /// dropped (with the merges that use them and special-token ids among them; Gemma 3 1B's
  /// <image_soft_token> = 262144 has no embedding row), and missing ids are padded with
  /// "[PADn]" tokens of type UNUSED (score -10000). Returns the number dropped (> 0) or padded
  /// (< 0). Throws eg::Error when the vocabulary is missing or inconsistent.
  static int64_t fit_gguf_vocab(std::vector<std::pair<std::string, GGUFValue>>& kv, int64_t rows);
  /// Id of the unknown token (-1 if none).
  int32_t unk_id() const;
  /// Id of the padding token "<pad>" (-1 if none).
  int32_t pad_id() const;

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

/// Turns a stream of ids into UTF-8 text pieces, piece by piece, such that the concatenation of
/// all push() results plus flush() always equals decode(all ids) (HF's decode), and no piece ever
/// holds part of a character. Text is held back only while it is undecided: HF's ByteFallback
/// turns a run of consecutive byte pieces ("<0xE5><0x8F><0xAB>") into its UTF-8 text when the
/// whole run is valid, else into one U+FFFD per byte, so a run is held until a non-byte piece
/// ends it (or flush()), unless it can no longer become valid UTF-8: then its U+FFFDs are emitted
/// at once, and one per further byte of the run. After flush() the detokenizer can be reused.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);
  /// Emits what is held back (a dangling byte run: its text if it is valid UTF-8, else one
  /// U+FFFD per byte, as decode()).
  std::string flush();

 private:
  std::string end_byte_run();

  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;       // bytes of the current byte run while it may still become valid
  bool run_invalid_ = false;  // the current byte run is invalid (its U+FFFDs already emitted)
  // Only for decoders other than Gemma's Replace+ByteFallback+Fuse: ids so far, how many of them
  // end at a non-byte piece (decided), text emitted.
  std::vector<int32_t> ids_;
  size_t stable_ = 0;
  std::string emitted_text_;
};

}  // namespace eg
