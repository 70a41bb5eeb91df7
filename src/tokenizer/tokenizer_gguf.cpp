// Tokenizer from / to GGUF metadata (declarations and conventions in tokenizer.h).
// Sources: llama.cpp src/llama-vocab.cpp (token types, SPM/BPE loading), convert_hf_to_gguf.py and
// gguf-py vocab.py (what the converter writes), HF tokenizers' SentencePieceExtractor (how a
// SentencePiece vocab becomes ranked BPE merges). Our own code.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace eg {

namespace {

// llama.cpp llama_token_type (llama-vocab.h).
enum TokenType : int64_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

const std::string kSpace = "\xE2\x96\x81";  // ▁

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

/// Gemma's tokenizer.json marks <unusedN> and <mask> as non-special added tokens.
bool gemma_nonspecial_control(const std::string& piece) {
  if (piece == "<mask>") return true;
  if (!starts_with(piece, "<unused") || piece.back() != '>' || piece.size() < 9) return false;
  for (size_t i = 7; i + 1 < piece.size(); ++i)
    if (piece[i] < '0' || piece[i] > '9') return false;
  return true;
}

/// Byte offsets of the UTF-8 character boundaries inside s (excluding 0 and s.size()).
std::vector<size_t> char_splits(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GGUFFile& g) {
  const std::string& origin = g.path();
  auto fail = [&](const std::string& m) -> void { throw Error(origin + ": " + m); };
  const std::string model = g.get_string("tokenizer.ggml.model");
  if (model != "llama" && model != "gemma4")
    fail("unsupported tokenizer.ggml.model '" + model + "' (supported: llama, gemma4)");
  const GGUFValue* tv = g.find("tokenizer.ggml.tokens");
  if (!tv || !tv->is_array() || tv->elem != GGUFType::STRING || tv->strs.empty())
    fail("tokenizer.ggml.tokens must be a non-empty string array");
  const std::vector<std::string>& tokens = tv->strs;
  const size_t n = tokens.size();
  if (n >= (size_t{1} << 30)) fail("tokenizer.ggml.tokens is too large");
  std::vector<int64_t> types(n, kNormal);
  if (const GGUFValue* tt = g.find("tokenizer.ggml.token_type")) {
    if (!tt->is_array() || tt->ints.size() != n) fail("tokenizer.ggml.token_type must hold one integer per token");
    types = tt->ints;
  }
  std::vector<double> scores(n, 0.0);
  if (const GGUFValue* sv = g.find("tokenizer.ggml.scores")) {
    if (!sv->is_array() || sv->floats.size() != n) fail("tokenizer.ggml.scores must hold one float per token");
    scores = sv->floats;
  }
  const GGUFValue* mv = g.find("tokenizer.ggml.merges");
  if (mv && (!mv->is_array() || mv->elem != GGUFType::STRING)) fail("tokenizer.ggml.merges must be a string array");
  if (model == "gemma4" && !mv) fail("tokenizer.ggml.model 'gemma4' needs tokenizer.ggml.merges");

  auto impl = std::make_unique<Impl>();
  Impl& im = *impl;
  tok::BpeModel& bpe = im.bpe;
  bpe.byte_fallback = true;
  bpe.fuse_unk = true;
  bpe.pieces.resize(n);
  bpe.has_piece.assign(n, 1);
  size_t total = 0;
  for (size_t id = 0; id < n; ++id) {
    // GGUF strings are raw bytes; a piece that is not UTF-8 would reach decoded text (found by
    // tests/fuzz/gguf_tokenizer_fuzz). Byte pieces are written as "<0xNN>" text, so no real
    // vocabulary has one.
    if (!utf8::is_valid(tokens[id])) fail("tokenizer.ggml.tokens[" + std::to_string(id) + "] is not valid UTF-8");
    std::string p = tokens[id];
    if (types[id] == kUserDefined && model == "llama") p = replace_all(p, " ", kSpace);
    total += p.size();
    bpe.pieces[id] = std::move(p);
  }
  bpe.vocab.init(n, total);
  for (size_t id = 0; id < n; ++id) bpe.vocab.insert(bpe.pieces[id], static_cast<int32_t>(id));

  // Merges.
  if (mv) {
    bpe.merges.init(mv->strs.size());
    std::string joined;
    for (size_t r = 0; r < mv->strs.size(); ++r) {
      const std::string& m = mv->strs[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) fail("tokenizer.ggml.merges[" + std::to_string(r) + "] is not \"a b\"");
      const std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
      joined.assign(a).append(b);
      const int32_t ia = bpe.vocab.find(a), ib = bpe.vocab.find(b), ij = bpe.vocab.find(joined);
      if (ia < 0 || ib < 0 || ij < 0)
        fail("tokenizer.ggml.merges[" + std::to_string(r) + "]: token not in the vocabulary");
      if (!bpe.merges.find(ia, ib)) bpe.merges.insert(ia, ib, tok::MergeInfo{static_cast<uint32_t>(r), ij});
    }
  } else {
    // Ranks: USER_DEFINED pieces first, then by score. Converters give every user-defined
    // piece the same score (llama.cpp: -1000), which loses their order; HF's tokenizer.json of a
    // SentencePiece vocabulary (Gemma 2/3: the runs of 2-31 spaces, "\n" and "\t") ranks their
    // merges first, the longer left part first, then the longer right part: "▁"×30 + "▁"
    // before "▁"×29 + "▁▁" before "▁"×29 + "▁" ... before "▁" + "▁". A run then grows from its
    // left end, as SentencePiece matches the longest symbol, and the last space of a run that
    // does not fit a symbol goes to the next word, as in HF.
    struct Cand {
      int user;  // 0 for USER_DEFINED (first), 1 otherwise
      double score;
      int32_t left_chars, right_chars;  // USER_DEFINED order (see above)
      int32_t id, a, b;
    };
    std::vector<Cand> cands;
    for (size_t id = 0; id < n; ++id) {
      if (types[id] != kNormal && types[id] != kUserDefined) continue;
      const std::string& p = bpe.pieces[id];
      const std::vector<size_t> splits = char_splits(p);
      const int32_t chars = static_cast<int32_t>(splits.size()) + 1;
      for (size_t k = 0; k < splits.size(); ++k) {
        const size_t s = splits[k];
        const int32_t a = bpe.vocab.find(std::string_view(p).substr(0, s));
        const int32_t b = bpe.vocab.find(std::string_view(p).substr(s));
        const int32_t left = static_cast<int32_t>(k) + 1;
        if (a >= 0 && b >= 0)
          cands.push_back({types[id] == kUserDefined ? 0 : 1, scores[id], left, chars - left, static_cast<int32_t>(id), a, b});
      }
    }
    std::sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
      if (x.user != y.user) return x.user < y.user;
      if (x.score != y.score) return x.score > y.score;
      if (x.user == 0 && x.left_chars != y.left_chars) return x.left_chars > y.left_chars;
      if (x.user == 0 && x.right_chars != y.right_chars) return x.right_chars > y.right_chars;
      if (x.id != y.id) return x.id < y.id;
      if (x.a != y.a) return x.a < y.a;
      return x.b < y.b;
    });
    bpe.merges.init(cands.size());
    for (size_t r = 0; r < cands.size(); ++r)
      if (!bpe.merges.find(cands[r].a, cands[r].b))
        bpe.merges.insert(cands[r].a, cands[r].b, tok::MergeInfo{static_cast<uint32_t>(r), cands[r].id});
  }
  const int64_t unk = g.get_int("tokenizer.ggml.unknown_token_id", -1);
  if (unk >= static_cast<int64_t>(n)) fail("tokenizer.ggml.unknown_token_id is outside the vocabulary");
  bpe.unk_id = static_cast<int32_t>(unk);
  bpe.finish_tables();

  // Added tokens: CONTROL and USER_DEFINED, matched in the raw text. llama.cpp's Gemma 4
  // converter marks the non-special added tokens NORMAL: for that model, the Gemma ones (runs of
  // "\n" or "\t", <unusedN>, <mask>, [multimodal]) are added tokens again, as in tokenizer.json.
  auto gemma4_added = [&](const std::string& p) {
    if (model != "gemma4" || p.empty()) return false;
    if (p.find_first_not_of('\n') == std::string::npos || p.find_first_not_of('\t') == std::string::npos) return true;
    return gemma_nonspecial_control(p) || p == "[multimodal]";
  };
  const int64_t special_ids[] = {g.get_int("tokenizer.ggml.bos_token_id", -1), g.get_int("tokenizer.ggml.eos_token_id", -1),
                                 g.get_int("tokenizer.ggml.unknown_token_id", -1), g.get_int("tokenizer.ggml.padding_token_id", -1)};
  // Which CONTROL tokens HF calls special: the bos/eos/unk/pad ids and the Gemma turn/image/tool
  // tokens (names with '_' or '|'); CONTROL tags like <mask>, <unusedN>, <table>, </h1> are
  // non-special added tokens in Gemma's tokenizer.json.
  auto is_special = [&](size_t id, const std::string& p) {
    for (int64_t s : special_ids)
      if (s == static_cast<int64_t>(id)) return true;
    if (p == "<pad>" || p == "<eos>" || p == "<bos>" || p == "<unk>" || p == "<s>" || p == "</s>") return true;
    return p.find('_') != std::string::npos || p.find('|') != std::string::npos;
  };
  for (size_t id = 0; id < n; ++id) {
    const bool normal_added = types[id] == kNormal && gemma4_added(bpe.pieces[id]);
    if (types[id] != kControl && types[id] != kUserDefined && !normal_added) continue;
    if (bpe.pieces[id].empty()) continue;
    tok::AddedToken a;
    a.content = bpe.pieces[id];
    a.id = static_cast<int32_t>(id);
    a.special = types[id] == kControl && is_special(id, a.content);
    a.normalized = false;
    im.added.push_back(std::move(a));
  }

  im.normalizer.push_back({Impl::NormStep::kReplace, " ", kSpace});
  im.has_decoder = true;
  im.decoder.push_back({Impl::DecStep::kReplace, kSpace, " "});
  im.decoder.push_back({Impl::DecStep::kByteFallback, "", ""});
  im.decoder.push_back({Impl::DecStep::kFuse, "", ""});

  auto id_key = [&](const char* k) -> int32_t {
    const int64_t v = g.get_int(k, -1);
    if (v >= static_cast<int64_t>(n)) fail(std::string(k) + " = " + std::to_string(v) + " is outside the vocabulary");
    return static_cast<int32_t>(v);
  };
  im.bos = id_key("tokenizer.ggml.bos_token_id");
  im.eos = id_key("tokenizer.ggml.eos_token_id");
  im.add_bos = g.get_bool("tokenizer.ggml.add_bos_token", true);
  if (im.bos >= 0) im.prefix_ids = {im.bos};
  if (g.get_bool("tokenizer.ggml.add_eos_token", false) && im.eos >= 0) im.suffix_ids = {im.eos};
  im.chat_template = g.get_string("tokenizer.chat_template", "");
  im.finish();
  return Tokenizer(std::move(impl));
}

int32_t Tokenizer::unk_id() const { return impl_->bpe.unk_id; }
int32_t Tokenizer::pad_id() const { return token_id("<pad>"); }

void Tokenizer::to_gguf_metadata(std::vector<std::pair<std::string, GGUFValue>>& kv, bool spm) const {
  const Impl& im = *impl_;
  const size_t n = im.id_piece.size();
  std::vector<std::string> tokens(n);
  std::vector<int64_t> types(n, kNormal);
  std::vector<double> scores(n, spm ? 0.0 : -1000.0);
  std::vector<uint8_t> added(n, 0);
  for (size_t id = 0; id < n; ++id) {
    if (!im.id_piece[id]) throw Error("tokenizer: id " + std::to_string(id) + " has no piece (cannot export to GGUF)");
    tokens[id] = *im.id_piece[id];
    if (byte_fallback_value(tokens[id]) >= 0) types[id] = kByte;
  }
  for (const tok::AddedToken& a : im.added) {
    added[a.id] = 1;
    const bool looks_special = a.content.size() >= 2 && a.content.front() == '<' && a.content.back() == '>';
    if (spm) {
      types[a.id] = (a.special || looks_special) ? kControl : kUserDefined;
    } else {
      // llama.cpp's converter marks these NORMAL; USER_DEFINED keeps HF's raw-text matching of
      // non-special added tokens (whitespace runs, <unusedN>) in llama.cpp too.
      types[a.id] = a.special ? kControl : kUserDefined;
    }
  }
  // Merges in rank order.
  struct M {
    uint32_t rank;
    int32_t a, b, id;
  };
  std::vector<M> merges;
  im.bpe.merges.for_each([&](int32_t a, int32_t b, const tok::MergeInfo& m) { merges.push_back({m.rank, a, b, m.new_id}); });
  std::sort(merges.begin(), merges.end(), [](const M& x, const M& y) { return x.rank < y.rank; });
  std::vector<std::string> merge_strs;
  merge_strs.reserve(merges.size());
  for (const M& m : merges) merge_strs.push_back(*im.id_piece[m.a] + " " + *im.id_piece[m.b]);

  if (spm) {
    // Scores: BYTE 0; merged piece −(rank of its first merge); single characters below every
    // merged piece; added tokens −1000 (what llama.cpp's converter pass gives them).
    std::vector<int64_t> first_rank(n, -1);
    for (size_t r = 0; r < merges.size(); ++r)
      if (first_rank[merges[r].id] < 0) first_rank[merges[r].id] = static_cast<int64_t>(r);
    const double below = -static_cast<double>(merges.size()) - 1.0;
    for (size_t id = 0; id < n; ++id) {
      if (types[id] == kByte) scores[id] = 0.0;
      else if (added[id]) scores[id] = -1000.0;
      else if (first_rank[id] >= 0) scores[id] = -static_cast<double>(first_rank[id]);
      else scores[id] = below - static_cast<double>(id);
      if (types[id] == kUserDefined) tokens[id] = replace_all(tokens[id], kSpace, " ");
    }
  } else {
    for (const char* u : {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                          "<tool_response|>", "<|\"|>"}) {
      const int32_t id = im.added_map.find(u);
      if (id >= 0) types[id] = kUserDefined;
    }
  }
  kv.emplace_back("tokenizer.ggml.model", GGUFValue::str(spm ? "llama" : "gemma4"));
  if (spm) kv.emplace_back("tokenizer.ggml.pre", GGUFValue::str("default"));
  kv.emplace_back("tokenizer.ggml.tokens", GGUFValue::str_array(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.scores", GGUFValue::f32_array(std::move(scores)));
  kv.emplace_back("tokenizer.ggml.token_type", GGUFValue::i32_array(std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", GGUFValue::str_array(std::move(merge_strs)));
  auto put_id = [&](const char* k, int32_t id) {
    if (id >= 0) kv.emplace_back(k, GGUFValue::u32(static_cast<uint32_t>(id)));
  };
  put_id("tokenizer.ggml.bos_token_id", im.bos);
  put_id("tokenizer.ggml.eos_token_id", im.eos);
  put_id("tokenizer.ggml.unknown_token_id", im.bpe.unk_id);
  put_id("tokenizer.ggml.padding_token_id", pad_id());
  kv.emplace_back("tokenizer.ggml.add_bos_token", GGUFValue::boolean(im.add_bos));
  kv.emplace_back("tokenizer.ggml.add_sep_token", GGUFValue::boolean(false));
  kv.emplace_back("tokenizer.ggml.add_eos_token", GGUFValue::boolean(!im.suffix_ids.empty()));
  if (!im.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", GGUFValue::str(im.chat_template));
  kv.emplace_back("tokenizer.ggml.add_space_prefix", GGUFValue::boolean(false));
}

int64_t Tokenizer::fit_gguf_vocab(std::vector<std::pair<std::string, GGUFValue>>& kv, int64_t rows) {
  auto find = [&](const std::string& k) -> GGUFValue* {
    for (auto& [key, v] : kv)
      if (key == k) return &v;
    return nullptr;
  };
  GGUFValue* tv = find("tokenizer.ggml.tokens");
  if (!tv || !tv->is_array() || tv->elem != GGUFType::STRING)
    throw Error("GGUF vocabulary: tokenizer.ggml.tokens is missing or not a string array");
  if (rows <= 0) throw Error("GGUF vocabulary: the embedding has no rows");
  const int64_t n = static_cast<int64_t>(tv->strs.size());
  GGUFValue* types = find("tokenizer.ggml.token_type");
  GGUFValue* scores = find("tokenizer.ggml.scores");
  if (types && (!types->is_array() || static_cast<int64_t>(types->ints.size()) != n))
    throw Error("GGUF vocabulary: tokenizer.ggml.token_type must hold one integer per token");
  if (scores && (!scores->is_array() || static_cast<int64_t>(scores->floats.size()) != n))
    throw Error("GGUF vocabulary: tokenizer.ggml.scores must hold one float per token");
  if (n == rows) return 0;
  if (n < rows) {
    for (int64_t id = n; id < rows; ++id) {
      tv->strs.push_back("[PAD" + std::to_string(id) + "]");
      if (types) types->ints.push_back(kUnused);
      if (scores) scores->floats.push_back(-10000.0);
    }
    return n - rows;
  }
  // Pieces as from_gguf sees them: a USER_DEFINED "  " of a SentencePiece file is "▁▁".
  const GGUFValue* model = find("tokenizer.ggml.model");
  const bool llama = model && model->s == "llama";
  std::unordered_set<std::string> kept;
  for (int64_t id = 0; id < rows; ++id) {
    kept.insert(tv->strs[id]);
    if (llama && types && types->ints[id] == kUserDefined) kept.insert(replace_all(tv->strs[id], " ", kSpace));
  }
  tv->strs.resize(rows);
  if (types) types->ints.resize(rows);
  if (scores) scores->floats.resize(rows);
  if (GGUFValue* mv = find("tokenizer.ggml.merges"); mv && mv->is_array()) {
    std::vector<std::string> keep;
    keep.reserve(mv->strs.size());
    for (std::string& m : mv->strs) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
      if (kept.count(a) && kept.count(b) && kept.count(a + b)) keep.push_back(std::move(m));
    }
    mv->strs = std::move(keep);
  }
  kv.erase(std::remove_if(kv.begin(), kv.end(),
                          [&](const auto& p) {
                            const std::string& k = p.first;
                            return starts_with(k, "tokenizer.ggml.") && k.size() > 9 &&
                                   k.compare(k.size() - 9, 9, "_token_id") == 0 && p.second.is_int() &&
                                   p.second.i >= rows;
                          }),
           kv.end());
  return n - rows;
}

}  // namespace eg
