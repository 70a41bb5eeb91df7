// Tokenizer::Impl: the loaded tokenizer.json pipeline (internal header).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hash_maps.h"
#include "tokenizer/tokenizer.h"

namespace eg {

struct Tokenizer::Impl {
  // ---- model and vocabulary ----
  tok::BpeModel bpe;
  std::vector<tok::AddedToken> added;          // deduplicated, in tokenizer.json order
  tok::StringIdMap added_map;                  // added content -> id
  tok::AddedTokenMatcher raw_matcher;          // added tokens with normalized:false
  tok::AddedTokenMatcher normalized_matcher;   // added tokens with normalized:true
  std::vector<const std::string*> id_piece;    // id -> its string (added first, as HF); null if none
  std::vector<uint8_t> id_special;             // 1 for special added tokens

  // ---- normalizer (applied in order) ----
  struct NormStep {
    enum Kind { kReplace, kPrepend } kind;
    std::string pattern;  // kReplace only
    std::string content;
  };
  std::vector<NormStep> normalizer;

  // ---- pre-tokenizer: Split steps with a string pattern (applied in order) ----
  struct SplitStep {
    enum Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
    std::string pattern;
    Behavior behavior;
    bool invert;
  };
  std::vector<SplitStep> pre_tokenizer;

  // ---- post-processor ----
  std::vector<int32_t> prefix_ids;  // added before the sequence by encode(add_bos=true)
  std::vector<int32_t> suffix_ids;  // added after it

  // ---- decoder ----
  struct DecStep {
    enum Kind { kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string pattern;  // kReplace
    std::string content;  // kReplace: replacement; kStrip: the stripped character
    size_t start = 0, stop = 0;  // kStrip
  };
  bool has_decoder = false;  // HF without a decoder joins tokens with " "
  std::vector<DecStep> decoder;
  /// True when the decoder is Replace* then ByteFallback then optional Fuse (the Gemma
  /// decoder): StreamingDetokenizer then works token by token.
  bool streaming_simple = false;

  // ---- tokenizer_config.json ----
  int32_t bos = -1;
  int32_t eos = -1;
  bool add_bos = true;
  std::string chat_template;

  // ---- operations (tokenizer.cpp) ----
  bool valid_id(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < id_piece.size() && id_piece[id] != nullptr;
  }
  void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;
  /// A token's text after the decoder's Replace steps that precede ByteFallback; sets *byte to
  /// the byte value when ByteFallback reads it as a byte piece "<0xNN>", else -1.
  std::string stream_piece(int32_t id, int* byte) const;

  // ---- loading (tokenizer_load.cpp) ----
  void load_tokenizer_json(const std::string& path);
  void load_config_json(const std::string& path);
  void finish();  // id tables, matchers, bos/eos defaults

 private:
  void normalize(std::string_view in, std::string& out) const;
  void tokenize_normalized(std::string_view s, bool parse_special, std::vector<int32_t>& out) const;
  void pre_tokenize(std::string_view s, std::vector<std::string_view>& words) const;
};

/// Parses the byte of a ByteFallback piece exactly as HF does: 6 bytes, "<0x" + 2 hex digits
/// (either case; Rust's from_str_radix also takes a leading '+') + ">". Returns -1 otherwise.
int byte_fallback_value(std::string_view piece);

}  // namespace eg
