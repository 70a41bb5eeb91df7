// Tokenizer: encode/decode pipeline and the streaming detokenizer.
// Loading (tokenizer.json / tokenizer_config.json) is in tokenizer_load.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace eg {

// ------------------------------------------------------------------------------------------
// Helpers

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void replace_all(std::string& s, std::string_view pattern, std::string_view content) {
  if (pattern.empty() || s.find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (true) {
    const size_t j = s.find(pattern, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out.append(content);
    i = j + pattern.size();
  }
  out.append(s, i, std::string::npos);
  s = std::move(out);
}

// HF ByteFallback: a run of byte pieces becomes its UTF-8 text, or one U+FFFD per byte when
// the run as a whole is not valid UTF-8.
void flush_byte_run(std::string& run, std::vector<std::string>& out) {
  if (run.empty()) return;
  if (utf8::is_valid(run)) {
    out.push_back(run);
  } else {
    for (size_t i = 0; i < run.size(); ++i) out.emplace_back(utf8::kReplacement);
  }
  run.clear();
}

// HF Strip decoder on one token: up to `start` leading and `stop` trailing `content` chars.
std::string strip_token(const std::string& tok, std::string_view content, size_t start,
                        size_t stop) {
  std::vector<size_t> offs;  // char start offsets
  for (size_t i = 0; i < tok.size();) {
    offs.push_back(i);
    size_t len = 0;
    utf8::decode_at(tok, i, &len);
    i += len;
  }
  const size_t n = offs.size();
  auto char_at = [&](size_t k) {
    const size_t e = (k + 1 < n) ? offs[k + 1] : tok.size();
    return std::string_view(tok).substr(offs[k], e - offs[k]);
  };
  size_t start_cut = 0;
  for (size_t k = 0; k < std::min(start, n); ++k) {
    if (char_at(k) != content) break;
    start_cut = k + 1;
  }
  size_t stop_cut = n;
  for (size_t k = 0; k < stop && k < n; ++k) {
    const size_t idx = n - k - 1;
    if (char_at(idx) != content) break;
    stop_cut = idx;
  }
  if (stop_cut <= start_cut) return std::string();
  const size_t b = offs[start_cut];
  const size_t e = stop_cut < n ? offs[stop_cut] : tok.size();
  return tok.substr(b, e - b);
}

}  // namespace

int byte_fallback_value(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
  if (p[3] == '+') return hex_digit(p[4]);
  const int hi = hex_digit(p[3]), lo = hex_digit(p[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

// ------------------------------------------------------------------------------------------
// Encoding

void Tokenizer::Impl::normalize(std::string_view in, std::string& out) const {
  out.assign(in);
  for (const NormStep& st : normalizer) {
    if (st.kind == NormStep::kReplace) {
      replace_all(out, st.pattern, st.content);
    } else if (!out.empty()) {  // Prepend: only non-empty strings
      out.insert(0, st.content);
    }
  }
}

void Tokenizer::Impl::pre_tokenize(std::string_view s, std::vector<std::string_view>& words) const {
  words.clear();
  if (!s.empty()) words.push_back(s);
  for (const SplitStep& st : pre_tokenizer) {
    std::vector<std::string_view> next;
    for (std::string_view w : words) {
      // (offsets, is_match) pieces covering w, as HF's find_matches for a string pattern.
      struct Piece {
        size_t b, e;
        bool m;
      };
      std::vector<Piece> pieces;
      size_t i = 0;
      while (!st.pattern.empty()) {
        const size_t j = w.find(st.pattern, i);
        if (j == std::string_view::npos) break;
        if (j > i) pieces.push_back({i, j, false});
        pieces.push_back({j, j + st.pattern.size(), true});
        i = j + st.pattern.size();
      }
      if (i < w.size()) pieces.push_back({i, w.size(), false});
      if (st.invert)
        for (Piece& p : pieces) p.m = !p.m;

      std::vector<Piece> res;
      bool prev_match = false;
      switch (st.behavior) {
        case SplitStep::kRemoved:
          for (const Piece& p : pieces)
            if (!p.m) res.push_back(p);
          break;
        case SplitStep::kIsolated:
          res = pieces;
          break;
        case SplitStep::kMergedWithPrevious:
          for (const Piece& p : pieces) {
            if (p.m && !prev_match && !res.empty()) res.back().e = p.e;
            else res.push_back(p);
            prev_match = p.m;
          }
          break;
        case SplitStep::kMergedWithNext:
          for (size_t k = pieces.size(); k-- > 0;) {
            const Piece& p = pieces[k];
            if (p.m && !prev_match && !res.empty()) res.back().b = p.b;
            else res.push_back(p);
            prev_match = p.m;
          }
          std::reverse(res.begin(), res.end());
          break;
        case SplitStep::kContiguous:
          for (size_t k = 0; k < pieces.size(); ++k) {
            const Piece& p = pieces[k];
            if (k > 0 && p.m == prev_match) res.back().e = p.e;
            else res.push_back(p);
            prev_match = p.m;
          }
          break;
      }
      for (const Piece& p : res)
        if (p.e > p.b) next.push_back(w.substr(p.b, p.e - p.b));
    }
    words = std::move(next);
  }
}

void Tokenizer::Impl::tokenize_normalized(std::string_view s, bool parse_special,
                                          std::vector<int32_t>& out) const {
  std::vector<std::string_view> words;
  pre_tokenize(s, words);
  for (std::string_view w : words) bpe.tokenize(w, out);
}

void Tokenizer::Impl::encode(std::string_view text, bool parse_special,
                             std::vector<int32_t>& out) const {
  // HF AddedVocabulary::extract_and_normalize, then pre-tokenizer and model on each piece.
  std::vector<tok::Segment> segs;
  raw_matcher.split(text, !parse_special, segs);
  std::string norm;
  std::vector<tok::Segment> nsegs;
  for (const tok::Segment& sg : segs) {
    if (sg.id >= 0) {
      out.push_back(sg.id);
      continue;
    }
    normalize(text.substr(sg.begin, sg.end - sg.begin), norm);
    if (normalized_matcher.empty()) {
      tokenize_normalized(norm, parse_special, out);
      continue;
    }
    nsegs.clear();
    normalized_matcher.split(norm, !parse_special, nsegs);
    for (const tok::Segment& ns : nsegs) {
      if (ns.id >= 0) out.push_back(ns.id);
      else tokenize_normalized(std::string_view(norm).substr(ns.begin, ns.end - ns.begin), parse_special, out);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Decoding

std::string Tokenizer::Impl::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (int32_t id : ids) {
    if (!valid_id(id)) continue;  // HF drops ids it does not know
    if (skip_special && id_special[id]) continue;
    toks.push_back(*id_piece[id]);
  }
  if (!has_decoder) {
    std::string out;
    for (size_t i = 0; i < toks.size(); ++i) {
      if (i) out += ' ';
      out += toks[i];
    }
    return out;
  }
  for (const DecStep& st : decoder) {
    switch (st.kind) {
      case DecStep::kReplace:
        for (std::string& t : toks) replace_all(t, st.pattern, st.content);
        break;
      case DecStep::kByteFallback: {
        std::vector<std::string> res;
        res.reserve(toks.size());
        std::string run;
        for (std::string& t : toks) {
          const int b = byte_fallback_value(t);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
          } else {
            flush_byte_run(run, res);
            res.push_back(std::move(t));
          }
        }
        flush_byte_run(run, res);
        toks = std::move(res);
        break;
      }
      case DecStep::kFuse: {
        std::string all;
        for (const std::string& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case DecStep::kStrip:
        for (std::string& t : toks) t = strip_token(t, st.content, st.start, st.stop);
        break;
    }
  }
  std::string out;
  for (const std::string& t : toks) out += t;
  return out;
}

std::string Tokenizer::Impl::stream_piece(int32_t id, int* byte) const {
  std::string t = *id_piece[id];
  *byte = -1;
  for (const DecStep& st : decoder) {
    if (st.kind == DecStep::kReplace) {
      replace_all(t, st.pattern, st.content);
    } else if (st.kind == DecStep::kByteFallback) {
      *byte = byte_fallback_value(t);
      break;
    }
  }
  return t;
}

// ------------------------------------------------------------------------------------------
// Public API

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("tokenizer: directory not found: " + dir);
  const std::string tj = (fs::path(dir) / "tokenizer.json").string();
  const std::string cj = (fs::path(dir) / "tokenizer_config.json").string();
  return load_files(tj, fs::exists(cj, ec) ? cj : std::string());
}

Tokenizer Tokenizer::load_files(const std::string& tokenizer_json, const std::string& config_json) {
  auto impl = std::make_unique<Impl>();
  impl->load_tokenizer_json(tokenizer_json);
  if (!config_json.empty()) impl->load_config_json(config_json);
  impl->finish();
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_bos) out.insert(out.end(), impl_->prefix_ids.begin(), impl_->prefix_ids.end());
  impl_->encode(text, parse_special, out);
  if (add_bos) out.insert(out.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return impl_->decode(ids, skip_special);
}

const std::string& Tokenizer::piece(int32_t id) const {
  if (!impl_->valid_id(id))
    throw Error("tokenizer: token id " + std::to_string(id) + " is out of range (vocab size " +
                std::to_string(vocab_size()) + ")");
  return *impl_->id_piece[id];
}

int32_t Tokenizer::token_id(std::string_view piece) const {
  const int32_t id = impl_->added_map.find(piece);
  return id >= 0 ? id : impl_->bpe.vocab.find(piece);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_piece.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::is_special(int32_t id) const { return impl_->valid_id(id) && impl_->id_special[id]; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ------------------------------------------------------------------------------------------
// StreamingDetokenizer

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

namespace {

// True when `run` is valid UTF-8 or a proper prefix of valid UTF-8 (its last character may be
// incomplete): the bytes that follow could still make the whole run valid.
bool may_become_valid(std::string_view run) {
  size_t i = 0;
  while (i < run.size()) {
    size_t len = 0;
    const auto st = utf8::check_char(run.substr(i), &len);
    if (st == utf8::CharStatus::kIncomplete) return true;
    if (st == utf8::CharStatus::kInvalid) return false;
    i += len;
  }
  return true;
}

std::string replacements(size_t n) {
  std::string out;
  out.reserve(n * utf8::kReplacement.size());
  for (size_t i = 0; i < n; ++i) out += utf8::kReplacement;
  return out;
}

}  // namespace

// HF's ByteFallback decides a run of consecutive byte pieces only when it ends (decode(): the run
// as a whole is its UTF-8 text, or one U+FFFD per byte), so a run is held back while it may still
// become valid UTF-8: a later stray byte turns even its complete characters into U+FFFD. Once the
// run can no longer be valid, its U+FFFDs are final: they are emitted at once, and so is one per
// further byte of the run.
std::string StreamingDetokenizer::end_byte_run() {
  std::string out;
  if (!run_invalid_ && !pending_.empty())
    out = utf8::is_valid(pending_) ? pending_ : replacements(pending_.size());
  pending_.clear();
  run_invalid_ = false;
  return out;
}

std::string StreamingDetokenizer::push(int32_t id) {
  const Tokenizer::Impl& im = *tok_.impl_;
  if (!im.valid_id(id)) return std::string();             // decode() drops unknown ids
  if (skip_special_ && im.id_special[id]) return std::string();  // and skipped specials (no run break)
  int byte = -1;
  std::string text = im.stream_piece(id, &byte);
  if (!im.streaming_simple) {
    // Generic decoders: decode everything so far, and emit the new part of the decode of the ids
    // up to the last one that is not a byte piece (a trailing byte run is still undecided).
    ids_.push_back(id);
    if (byte < 0) stable_ = ids_.size();
    if (stable_ == 0) return std::string();
    const std::string full = im.decode(std::vector<int32_t>(ids_.begin(), ids_.begin() + stable_), skip_special_);
    if (full.size() < emitted_text_.size() || full.compare(0, emitted_text_.size(), emitted_text_) != 0)
      return std::string();  // (a decoder that rewrites earlier text: flush() emits the rest)
    std::string out = full.substr(emitted_text_.size());
    emitted_text_ = full;
    return out;
  }
  if (byte >= 0) {
    if (run_invalid_) return std::string(utf8::kReplacement);
    pending_.push_back(static_cast<char>(byte));
    if (may_become_valid(pending_)) return std::string();
    std::string out = replacements(pending_.size());
    pending_.clear();
    run_invalid_ = true;
    return out;
  }
  std::string out = end_byte_run();
  out += text;
  return out;
}

std::string StreamingDetokenizer::flush() {
  const Tokenizer::Impl& im = *tok_.impl_;
  if (!im.streaming_simple) {
    const std::string full = im.decode(ids_, skip_special_);
    std::string out = full.compare(0, emitted_text_.size(), emitted_text_) == 0
                          ? full.substr(emitted_text_.size())
                          : std::string();
    ids_.clear();
    emitted_text_.clear();
    stable_ = 0;
    return out;
  }
  return end_byte_run();  // a dangling run: its text if valid, else one U+FFFD per byte
}

}  // namespace eg
